"""validate: published measurements → scenarios → predictions, with the error of each case."""
