package plan

import (
	"time"

	"keel/internal/records"
)

// Summary is a plan's progress.
type Summary struct {
	Total   int `json:"total"`
	Done    int `json:"done"`
	Running int `json:"running"`
	Left    int `json:"left"` // pending
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
	// Cancelled moves (the plan was cancelled before they started, or
	// they were aborted).
	Cancelled int `json:"cancelled"`
	// BytesCopied is the memory copied by the moves so far; BytesLeft
	// what the running and pending moves still have to copy (their RAM,
	// less what the running ones copied).
	BytesCopied int64 `json:"bytes_copied"`
	BytesLeft   int64 `json:"bytes_left"`
	// RateBytesPerSec is the plan's measured throughput: the bytes its
	// moves copied, over the wall time since the plan started (so moves
	// in parallel count as they ran).
	RateBytesPerSec float64 `json:"rate_bytes_per_sec"`
	// ETA is BytesLeft at that rate (0 when nothing is measured yet or
	// nothing is left).
	ETA time.Duration `json:"eta_ns"`
}

// Summarise computes a plan's progress at now.
func Summarise(p records.Plan, now time.Time) Summary {
	s := Summary{Total: len(p.Moves)}
	for _, mv := range p.Moves {
		s.BytesCopied += mv.BytesCopied
		switch mv.State {
		case records.MoveDone:
			s.Done++
		case records.MoveStarting, records.MoveRunning:
			s.Running++
			s.BytesLeft += max(mv.RAMMB<<20-mv.BytesCopied, 0)
		case records.MovePending:
			s.Left++
			s.BytesLeft += mv.RAMMB << 20
		case records.MoveFailed:
			s.Failed++
		case records.MoveSkipped:
			s.Skipped++
		case records.MoveCancelled:
			s.Cancelled++
		}
	}
	end := now
	if !p.FinishedAt.IsZero() {
		end = p.FinishedAt
	}
	if el := end.Sub(p.StartedAt); !p.StartedAt.IsZero() && el > 0 && s.BytesCopied > 0 {
		s.RateBytesPerSec = float64(s.BytesCopied) / el.Seconds()
	}
	if s.RateBytesPerSec > 0 && s.BytesLeft > 0 {
		s.ETA = time.Duration(float64(s.BytesLeft) / s.RateBytesPerSec * float64(time.Second))
	}
	return s
}
