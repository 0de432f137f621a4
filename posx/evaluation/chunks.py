"""How many token rows of logits the loss computes at once: the scorer's and the memory
estimates' one number, plain Python so an estimate made before torch is imported reads it."""

LOSS_CHUNK = 4096  # token rows whose float32 logits exist at once (a 150k vocabulary: 2.4 GiB)
