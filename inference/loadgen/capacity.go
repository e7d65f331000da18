package loadgen

import (
	"context"
	"fmt"
	"math"
	"time"
)

// CapacitySpec says how SearchCapacity looks for the highest sustainable rate.
type CapacitySpec struct {
	// SLO bounds the latency quantile; if 0, 10 ms.
	SLO time.Duration
	// Quantile is the latency quantile held to the SLO; if 0, 0.99.
	Quantile float64
	// Start is the first rate tried, in requests per second; if 0, 100.
	Start float64
	// Max is the highest rate tried; if 0, 1e6.
	Max float64
	// Trial is how long each trial sends for; if 0, 1 s. A trial sends at least
	// MinRequests (if 0, 200) requests whatever its length.
	Trial       time.Duration
	MinRequests int
	// Precision ends the search when the bracket [ok, too fast] is narrower
	// than this fraction of its lower end; if 0, 0.05.
	Precision float64
	// Seed seeds the Poisson arrivals of every trial.
	Seed uint64
}

// Trial is one rate tried by SearchCapacity.
type Trial struct {
	Rate     float64       // offered requests per second
	Sent     int           // requests sent
	Failed   int           // requests that failed
	Late     int           // sends that started late
	P50      time.Duration // median latency from the scheduled send time
	Quantile time.Duration // the SLO's quantile
	OK       bool          // Quantile <= SLO and nothing failed
}

// Capacity is the outcome of SearchCapacity.
type Capacity struct {
	// Rate is the highest rate whose trial met the SLO (0 if none did).
	Rate   float64
	Trials []Trial // in the order they ran
}

// SearchCapacity drives t with open-loop Poisson traffic at increasing rates,
// doubling from spec.Start until a trial misses the SLO, then bisecting
// (geometrically) between the last rate that met it and the first that did
// not. Each trial drains before the next starts.
func SearchCapacity(ctx context.Context, t Target, spec CapacitySpec) (Capacity, error) {
	if spec.SLO == 0 {
		spec.SLO = 10 * time.Millisecond
	}
	if spec.Quantile == 0 {
		spec.Quantile = 0.99
	}
	if spec.Start == 0 {
		spec.Start = 100
	}
	if spec.Max == 0 {
		spec.Max = 1e6
	}
	if spec.Trial == 0 {
		spec.Trial = time.Second
	}
	if spec.MinRequests == 0 {
		spec.MinRequests = 200
	}
	if spec.Precision == 0 {
		spec.Precision = 0.05
	}
	if spec.SLO < 0 || spec.Quantile < 0 || spec.Quantile > 1 || spec.Start < 0 || spec.Max < spec.Start || spec.Precision < 0 {
		return Capacity{}, fmt.Errorf("loadgen: invalid capacity spec %+v", spec)
	}
	var c Capacity
	try := func(rate float64) (bool, error) {
		n := max(spec.MinRequests, int(math.Ceil(rate*spec.Trial.Seconds())))
		res, err := Run(ctx, t, Spec{Mode: Open, Rate: rate, Poisson: true, Seed: spec.Seed + uint64(len(c.Trials))}, n)
		if err != nil {
			return false, err
		}
		tr := Trial{Rate: rate, Sent: res.Sent, Failed: res.Failed, Late: res.Late,
			P50: res.Latency.Quantile(0.5), Quantile: res.Latency.Quantile(spec.Quantile)}
		tr.OK = tr.Failed == 0 && res.Latency.Count() > 0 && tr.Quantile <= spec.SLO
		c.Trials = append(c.Trials, tr)
		return tr.OK, nil
	}
	lo, hi := 0.0, 0.0
	for rate := spec.Start; ; rate = math.Min(2*rate, spec.Max) {
		ok, err := try(rate)
		if err != nil {
			return c, err
		}
		if !ok {
			hi = rate
			break
		}
		lo = rate
		if rate == spec.Max {
			c.Rate = lo
			return c, nil
		}
	}
	if lo == 0 {
		return c, nil // even the first rate missed the SLO
	}
	for hi/lo-1 > spec.Precision {
		mid := math.Sqrt(lo * hi)
		ok, err := try(mid)
		if err != nil {
			return c, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	c.Rate = lo
	return c, nil
}
