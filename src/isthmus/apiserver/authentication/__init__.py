"""Authentication: who sent a request (k8s.io/apiserver/pkg/authentication and pkg/serviceaccount).

- `authenticators.py`: the authenticator chain (x509 client certificates, bearer tokens, anonymous)
  producing each request's `UserInfo`.
- `serviceaccounts.py`: ServiceAccount tokens, issued and verified (bound and legacy JWTs).
- `tls.py`: the CAs and certificates kept in the data dir: the serving certificate, the client CA
  whose certificates the x509 authenticator trusts, and the admin client certificate.
"""
