"""Drives the /mcp endpoint with the official Python SDK (`mcp` on PyPI): connect with a
bearer token, list the tools, call one, and print one JSON line per step for the Rust test
to read. Any failure exits non-zero.

Usage: python3 mcp_client.py MCP_URL BEARER TOOL ARGUMENTS_JSON
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


async def main(url: str, bearer: str, tool: str, arguments: dict) -> None:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {bearer}"})
    async with http, streamable_http_client(url, http_client=http) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            initialized = await session.initialize()
            print(json.dumps({"connected": initialized.server_info.name, "protocol": initialized.protocol_version}))
            listed = await session.list_tools()
            print(json.dumps({"tools": [tool.name for tool in listed.tools]}))
            result = await session.call_tool(tool, arguments)
            print(json.dumps({"call": tool, "isError": result.is_error, "structuredContent": result.structured_content}))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
