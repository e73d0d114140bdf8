"""Server-side apply and managedFields, as k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager with
sigs.k8s.io/structured-merge-diff under it.

- `fieldmanager.py`: `server_side_apply` and `track_update`, what every write's managedFields go through.
- `fieldpath.py`: field paths and sets as fieldsV1 spells them.
- `typed.py`: values read through their schema: list kinds and keys, the fields a configuration
  sets, the comparison of two objects.
- `managedfields.py`: metadata.managedFields entries, decoded, capped and encoded.
- `merge.py`: apply's merge of a configuration into the live object, and the prune after it.
"""
