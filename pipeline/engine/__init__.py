"""Translation engine: the ``Translator`` interface, CTranslate2 backend, registry, batching.

Import the submodules directly (``pipeline.engine.translator`` loads
CTranslate2; ``pipeline.engine.batching`` and ``pipeline.engine.registry``
do not).
"""
