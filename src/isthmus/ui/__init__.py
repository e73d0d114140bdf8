"""`isthmus ui`: a read-only, live web view of a clusterset.

- `kinds.py`: what is watched, where (broker, members), as lightkube resources.
- `model.py`: pure: the objects seen per cluster → the page's view (clusters and their health,
  services with exporters and importers, MultiClusterServices, pools, egress), and the delta
  between two views (what the browser is sent after its snapshot).
- `watch.py`: one set of informers per kubeconfig context, feeding a `Store` and reporting a
  cluster whose API cannot be reached.
- `server.py`: the aiohttp server: the page (static/, no build step), the snapshot, the
  server-sent events stream of deltas, and one object's YAML, conditions and Events on demand.
  It has no write endpoint.
"""
