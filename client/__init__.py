"""What users call: errors and the streaming output-mode guard (readers arrive with the plugin)."""

from client.errors import CdcAnalysisException
from client.output_mode_guard import install_output_mode_guard

install_output_mode_guard()

__all__ = ["CdcAnalysisException", "install_output_mode_guard"]
