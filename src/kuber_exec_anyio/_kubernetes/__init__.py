"""Kubernetes: ``KubernetesBackend``, the cluster's configuration and credentials, the REST
client and its HTTP network, the watch cache, the SelfSubjectAccessReview pre-flight and the
session slots held as Leases."""
