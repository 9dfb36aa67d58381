"""Sample quality: pure-numpy metrics, the judge CNN, evaluation of runs, and policy comparison."""
