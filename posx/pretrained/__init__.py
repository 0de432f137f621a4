"""Pretrained Hugging Face causal LMs under posx's protocols (``posx eval hf:NAME_OR_DIR``).

``transformers`` is an optional extra (``pip install 'posx[transformers]'``), imported only when
a model is loaded (:mod:`posx.pretrained.load`)."""
