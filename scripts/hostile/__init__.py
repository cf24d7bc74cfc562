"""The hostile probes of ``scripts/hostile_probes.py``, one module per area."""
