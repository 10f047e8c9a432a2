"""The one place that wires the agent: stages, long-running tasks and the cycle (see agent.py)."""
