package conductor

import (
	"context"
	"fmt"

	"keel/internal/records"
)

// ConsoleAPI is what os-getConsoleOutput asks of an agent: the end of a
// guest's serial console log (at most compute.MaxConsoleBytes).
type ConsoleAPI interface {
	ConsoleOutput(ctx context.Context, uuid string) ([]byte, error)
}

// ConsoleOutput asks the agent of inst's host for the end of its guest's
// console log (Nova's get_console_output). inst must have a host.
func (c *Conductor) ConsoleOutput(ctx context.Context, inst records.Instance) ([]byte, error) {
	api, err := c.agents.compute(inst.Host)
	if err != nil {
		return nil, err
	}
	ca, ok := api.(ConsoleAPI)
	if !ok {
		return nil, fmt.Errorf("the agent of %s cannot read console logs", inst.Host)
	}
	out, err := ca.ConsoleOutput(ctx, inst.UUID)
	if err != nil {
		return nil, fmt.Errorf("console output of %s: %w", inst.UUID, err)
	}
	return out, nil
}
