

__path__ = []


__all__ = ["ToolError", "json_parse", "shell_quote", "retry", "create_ticket", "docs", "web_archive", "billing"]


def _source_docs():
    def get_page() -> Any:
        """Named with a dash.

        The host knows this tool as "docs.get-page".

        Returns:
            Any: the tool's JSON result (its shape is not declared).

        Raises:
            ToolError: the host refused the call or the tool failed.
        """
        return _call("docs.get-page", {})

    def search(query: str, limit: int = 5) -> Any:
        """Search docs.

        The host knows this tool as "docs.search".

        Args:
            query (str):
            limit (int):

        Returns:
            Any: the tool's JSON result (its shape is not declared).

        Raises:
            ToolError: the host refused the call or the tool failed.
        """
        return _call("docs.search", {"query": query, "limit": limit})

    return _namespace("docs", "Tools of the source \"docs\".", [get_page, search])


docs = _source_docs()
del _source_docs


def _source_web_archive():
    def search(query: str, limit: int = 5) -> Any:
        """Search web-archive.

        The host knows this tool as "web-archive.search".

        Args:
            query (str):
            limit (int):

        Returns:
            Any: the tool's JSON result (its shape is not declared).

        Raises:
            ToolError: the host refused the call or the tool failed.
        """
        return _call("web-archive.search", {"query": query, "limit": limit})

    return _namespace("web_archive", "Tools of the source \"web-archive\".", [search])


web_archive = _source_web_archive()
del _source_web_archive


billing = _unavailable("billing", "billing", "Tools of the source \"billing\".", "MCP server \"billing\" failed to start: exit status 1")


def create_ticket() -> Any:
    """Top level.

    Returns:
        Any: the tool's JSON result (its shape is not declared).

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    return _call("create_ticket", {})
