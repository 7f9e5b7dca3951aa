"""GEM's ``gem.tools``: its tool classes by their module paths, on gem-core's tool packages.

``gem.tools.python_code_tool.PythonCodeTool`` (gem-tool-python), ``gem.tools.search_tool.SearchTool``
(gem-tool-search), ``gem.tools.mcp_tool.MCPTool`` (gem-tool-mcp) and
``gem.tools.tool_env_wrapper.ToolEnvWrapper`` (gem-core) take GEM's constructor arguments.
"""
