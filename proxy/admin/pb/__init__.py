"""Generated from protos/triton_tap/admin/v1/admin.proto by ``python -m proxy.admin.protogen``: do not edit."""
