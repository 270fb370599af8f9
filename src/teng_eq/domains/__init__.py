"""Where an equation lives: quadratures (:mod:`.quadrature`) and the domains an equation has."""
