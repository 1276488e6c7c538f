"""Tests of workflows and activities on a real Temporal server (marked `temporal`)."""
