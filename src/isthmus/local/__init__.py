"""The local clusterset: `isthmus up/status/down` (a supervisor for one apiserver per cluster and the
broker, kube-lite, agents, DNS servers and proxies on 127.0.0.0/8) and `isthmus demo`.
"""
