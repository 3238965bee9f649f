package namespace

import "math"

// Imbalance returns the coefficient of variation of counts: the population
// standard deviation divided by the mean. It is 0 for an empty slice or a
// mean of 0 or less. A manager can plan a rebalance only when the
// imbalance of island loads exceeds a threshold, which keeps measurement
// noise from moving entries back and forth between plans.
func Imbalance(counts []float64) float64 {
	if len(counts) == 0 {
		return 0
	}
	n := float64(len(counts))
	var sum float64
	for _, c := range counts {
		sum += c
	}
	mean := sum / n
	if !(mean > 0) {
		return 0
	}
	var ss float64
	for _, c := range counts {
		ss += (c - mean) * (c - mean)
	}
	return math.Sqrt(ss/n) / mean
}
