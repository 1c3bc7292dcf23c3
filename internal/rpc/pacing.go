package rpc

import (
	"math/rand/v2"
	"sync"
	"time"
)

// pacing spaces an agent's store calls while the servers are slow or
// unreachable. Every store call that went unanswered or undelivered raises
// its level by one (up to maxPacingLevel), every answered call resets it
// to zero. At level n an attempt waits attemptTime·2ⁿ for its answer
// before it is sent again (at most maxAttempt), and a call nobody received
// is sent again after a pause of retryPause·2ⁿ⁺ᵏ (k: the call's own
// retries so far; at most maxRetryPause), each with jitter.
//
// Without it, every agent of a fleet whose servers had fallen behind sent
// each heartbeat again after 5 s (5,042 repeats in 10 s at 6,565 agents)
// and each undelivered call about once a second: the load grew with the
// overload. Repeats carry the call's request id, so a slower pace loses
// nothing: the first attempt is still answered. The heartbeat keeps its
// interval and its deadline (report_interval): a host that is merely slow
// to be answered is not sent fewer heartbeats, only fewer copies of each.
type pacing struct {
	mu    sync.Mutex
	level int
	rnd   func(n int64) int64 // nil: math/rand/v2
	// attempt0 replaces attemptTime as level 0's attempt (tests).
	attempt0 time.Duration
}

const (
	maxPacingLevel = 6
	retryPause     = 50 * time.Millisecond
	maxRetryPause  = 5 * time.Second
	maxAttempt     = 40 * time.Second
)

// attempt is how long an attempt waits for its answer now: attemptTime at
// level 0, doubled per level up to maxAttempt, plus up to a quarter more.
func (p *pacing) attempt() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := min(p.base()<<p.level, maxAttempt)
	return d + p.jitter(d/4+1)
}

// base is level 0's attempt time.
func (p *pacing) base() time.Duration {
	if p.attempt0 > 0 {
		return p.attempt0
	}
	return attemptTime
}

// pause is how long to wait before the retry-th retry (0: the first) of a
// call nobody received: between half and all of retryPause·2^(level+retry),
// capped at maxRetryPause.
func (p *pacing) pause(retry int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := maxRetryPause
	if n := p.level + retry; n < 16 {
		d = min(retryPause<<n, maxRetryPause)
	}
	return d/2 + p.jitter(d/2+1)
}

// failed notes a call that got no answer (undelivered, lost or late).
func (p *pacing) failed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.level = min(p.level+1, maxPacingLevel)
}

// answered notes a call the servers answered (with a result or an
// error) after took. An answer within attemptTime resets the pace; a later
// one leaves it as it is: the servers answer, but slowly, and repeating
// sooner would only add to their queue.
func (p *pacing) answered(took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if took < p.base() {
		p.level = 0
	}
}

// jitter is a random duration in [0, d); p.mu is held.
func (p *pacing) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if p.rnd != nil {
		return time.Duration(p.rnd(int64(d)))
	}
	return time.Duration(rand.Int64N(int64(d)))
}
