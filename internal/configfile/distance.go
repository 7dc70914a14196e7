package configfile

// EditDistance is the Levenshtein distance of a and b, in bytes (the measure behind the file
// decoder's "did you mean"), for other places that suggest a name. Quadratic: callers bound
// the lengths.
func EditDistance(a, b string) int { return editDistance(a, b) }
