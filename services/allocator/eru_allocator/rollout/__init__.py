"""Rolling replace's reads (docs/cli.md "Rolling replace"): the images a workload has run (`history.py`). The waves
themselves are driven by `eru workload replace` over the existing replace with rollback (eru.rollout)."""
