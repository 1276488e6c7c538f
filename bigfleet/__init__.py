"""BigFleet's pure core: everything that decides, with no Temporal import and no I/O."""
