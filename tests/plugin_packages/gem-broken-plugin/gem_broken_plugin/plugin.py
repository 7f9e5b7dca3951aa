import a_dependency_that_is_not_installed  # noqa: F401  (the failure under test)
