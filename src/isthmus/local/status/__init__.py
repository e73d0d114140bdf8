"""The read side of the local clusterset: `isthmus status` (and `up`'s wait for ready), one reader
per part.

`collect.py` assembles the `status -o json` document from the readers: `parts.py` the supervised
parts (apiservers, kube-lites, the web view: alive, probed ready, restarts), `pods.py` the
components running as pods (agent, dns, controller manager...: read from their Deployments),
`members.py` membership and heartbeats as the broker has them, `addresses.py` each cluster's
addresses from the address plan; `health.py` holds the words they report in. Bring-up is
`local/up.py`; nothing here starts or stops anything.
"""
