"""gem-tool-mcp: tools of any MCP server, as gem tools over one long-lived session.

>>> import sys
>>> from gem_tool_mcp import MCPToolset
>>> toolset = MCPToolset(command=sys.executable, args=["-m", "mcp_server_time"])
>>> # tools = toolset.tools(); ToolEnvWrapper(env, tools=[*tools]); ...; toolset.close()
"""

from gem_tool_mcp.toolset import MCPConfig, MCPTool, MCPToolset, render_call_result

__all__ = ["MCPConfig", "MCPTool", "MCPToolset", "render_call_result"]
