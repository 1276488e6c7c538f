"""Generated from proto/bigfleet/v1 by bigfleet/edge/codegen.py: do not edit."""
