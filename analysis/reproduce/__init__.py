"""One command reproduces the thesis' and the LBDD paper's evaluations (``rangecast
reproduce``): the plans (plans), the run of them and the page (command), the figures over seeds
(evaluate), the comparison with the papers and its tolerances (compare), why we differ (notes),
and the page with its confidence-interval figures (page). See docs/reproduce.md."""
