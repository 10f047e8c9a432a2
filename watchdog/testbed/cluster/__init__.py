"""The cluster around a simulated GPU node, faked at its real boundaries: a Kubernetes-faithful API server over
real HTTP, a kubelet PodResources server over real gRPC on a unix socket, and a /proc tree on disk."""
