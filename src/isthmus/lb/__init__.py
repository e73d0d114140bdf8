"""Load balancing, the translator (dklb's role): Services of type LoadBalancer and Ingresses of class edgelb become LoadBalancerPools."""
