"""The pool manager (EdgeLB's role): runs each LoadBalancerPool as HAProxy master-worker processes."""
