"""The demo: the whole agent on a simulated GPU node, with a live terminal table."""
