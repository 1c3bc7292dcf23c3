package bus

import "time"

// SetLivenessInterval makes the connections made from now on check their
// server's liveness every d (Conn.watch), until restore is called.
func SetLivenessInterval(d time.Duration) (restore func()) {
	old := livenessInterval
	livenessInterval = d
	return func() { livenessInterval = old }
}
