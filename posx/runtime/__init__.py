"""Where and how computation runs: devices and DDP process groups (:mod:`~posx.runtime.distributed`)
and numeric precision (:mod:`~posx.runtime.precision`)."""
