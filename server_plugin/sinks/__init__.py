"""Python data source writers the server discovers by name: ``apply`` (``spark_cdc_apply``,
``apply_changes``' engine) and ``spool`` (``spark_cdc_spool``, the command line's live feed).
A sink may import any other part of ``spark_cdc.server_plugin`` (a target's format); nothing
but the discovery modules imports a sink."""
