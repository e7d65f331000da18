package metrics

import (
	"errors"
	"sync"
	"time"
)

// Periodic averages readings taken at the end of every period between Start
// and Stop (not at Start: a reading such as NVML's utilisation describes the
// recent past, which would be before the interval). Start and Stop are called
// from one goroutine, in turn.
type Periodic struct {
	period time.Duration
	read   func() ([]float64, error) // the readings of one period; each counts as a sample

	mu      sync.Mutex
	sum     float64
	samples int
	err     error // first failed read of the interval

	stop chan struct{} // non-nil while an interval runs
	done chan struct{}
}

// NewPeriodic returns a Periodic that calls read every period.
func NewPeriodic(period time.Duration, read func() ([]float64, error)) *Periodic {
	return &Periodic{period: period, read: read}
}

// Period is the time between readings.
func (p *Periodic) Period() time.Duration { return p.period }

// Running reports whether an interval has started and not stopped.
func (p *Periodic) Running() bool { return p.stop != nil }

// Start begins an interval on a goroutine of its own.
func (p *Periodic) Start() error {
	if p.stop != nil {
		return errors.New("metrics: Periodic started twice without Stop")
	}
	p.mu.Lock()
	p.sum, p.samples, p.err = 0, 0, nil
	p.mu.Unlock()
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.loop(p.stop, p.done)
	return nil
}

func (p *Periodic) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(p.period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.sample()
		}
	}
}

func (p *Periodic) sample() {
	v, err := p.read()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if p.err == nil {
			p.err = err
		}
		return
	}
	for _, x := range v {
		p.sum += x
		p.samples++
	}
}

// Stop ends the interval, waits for its goroutine, and returns the mean of
// the readings and how many it averages (0, and a mean that is no
// measurement, for an interval shorter than a period). The error is the
// first failed read, if any.
func (p *Periodic) Stop() (mean float64, samples int, err error) {
	if p.stop == nil {
		return 0, 0, errors.New("metrics: Periodic stopped without Start")
	}
	close(p.stop)
	<-p.done
	p.stop, p.done = nil, nil
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.samples > 0 {
		mean = p.sum / float64(p.samples)
	}
	return mean, p.samples, p.err
}
