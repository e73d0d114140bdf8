"""Storage, as k8s.io/apiserver/pkg/storage and its etcd3 backend are to kube-apiserver.

- `store.py`: `Store`, every object in memory with one resourceVersion counter, the watch history,
  and the synchronous write path (create, update, delete) that feeds watches and callbacks.
- `watch.py`: `Watch` (one watcher's bounded, filtered queue) and `WatchEvent`.
- `journal.py`: durability: the SQLite file and the journal every write is appended to first.
- `filewatch.py`: inotify, so the journal notices at once when its files are changed under it.
- `datadir.py`: the data dir's private modes and its "initialised before" marker.
"""
