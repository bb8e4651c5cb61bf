package cluster

// Crash stops n as a crash would: no goodbye, the heartbeat is left to
// expire.
func (n *Node) Crash() {
	n.cancel()
	n.nc.Close()
}
