"""Commands that ask every node's agent at once, from one place in the cluster (the controller's pod)."""
