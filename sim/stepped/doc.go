// Package stepped runs the engine's Member, whole (gms membership, the
// nakack protocol and the agent's duty cycle with its send ring, bundling,
// routing and flow control), as nodes of the deterministic simulator
// (package sim). A member leaves gracefully (Cluster.Leave:
// engine.Member.StepClose, Close's drain and leave on the virtual clock)
// or crashes (Cluster.Crash). It is its own package because it imports engine, which sim must not
// (engine's tests may use sim).
//
// A member is opened with engine.OpenStepped: it starts no goroutine, its
// protocol clock is the simulator's virtual clock, gms's random choices
// come from the run's seed, and its transport is this package's: writes
// are queued for the simulator's Drain and reads return what the
// simulator delivered. Every Receive, Tick and action steps the member's
// duty cycle (Member.Step) until it is idle, so a run is a pure function
// of its seed and configuration, and a failing seed replays.
//
// A Cluster is one simulated group: a sim.Sim, its Nodes, traffic
// generators (Traffic: TrySend at a fixed rate, a refused message is not
// retried) and the application of every node (App: per-sender streams of
// what the member delivered and was told lost, checked for FIFO order as
// they come). Check runs the end checks of a settled group (see Check).
package stepped
