"""The networks TENG evolves: the paper's (:mod:`.paper`) and a network seen as a function of
one flat parameter vector (:mod:`.space`)."""
