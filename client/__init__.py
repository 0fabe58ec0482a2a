"""What users call: the changelog reader, errors and the streaming output-mode guard."""

from client.changelog_reader import ChangelogReader
from client.errors import CdcAnalysisException
from client.output_mode_guard import install_output_mode_guard
from server_plugin.delta_changelog import register as register_delta_changelog

install_output_mode_guard()

__all__ = [
    "CdcAnalysisException",
    "ChangelogReader",
    "install_output_mode_guard",
    "register_delta_changelog",
]
