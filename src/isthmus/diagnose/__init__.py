"""`isthmus diagnose` and `isthmus gather`: what is wrong with a clusterset, and everything a bug
report needs, read through the Kubernetes API of every cluster and the broker.

It sits beside `local/`, above the capabilities: it reads every capability's objects (through
`api/` models and the discovery views) but no capability imports it. `model` is the pure result,
`checks` the checks, `run` their orchestration, `net` the probes besides API requests (DNS over
UDP, TCP connects), `gather` the archive.
"""
