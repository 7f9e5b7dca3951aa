"""The container backend's fixture tasks hold Terminal-Bench checkers (test_outputs.py): they are data here."""

collect_ignore_glob = ["container_tasks/*"]
