package gms

// Tasks says which membership tasks a member has under way. A member with
// none (Idle) holds no capture for gms and waits for nothing: drivers and
// tests use it to tell a settled group from one still changing views,
// cutting a departed sender, merging or transferring state.
type Tasks struct {
	// ViewChange: as coordinator, a view is being installed (waiting for
	// acknowledgements).
	ViewChange bool
	// Merge: as merge leader, a merge is under way; MergeHold: as another
	// coordinator, a capture is held for a leader's merge.
	Merge, MergeHold bool
	// StateRequest: a state transfer is being fetched; StateServing: how
	// many are being served.
	StateRequest bool
	StateServing int
	// Cuts: departed senders' cuts this member runs as coordinator that
	// are not closed; MemberCuts: cuts applied here whose window is not
	// closed yet; OpenWindows: departed senders whose window is still open
	// here (a cut under way or yet to start).
	Cuts, MemberCuts, OpenWindows int
}

// Idle reports whether no task is under way.
func (t Tasks) Idle() bool { return t == Tasks{} }

// Tasks returns the membership tasks under way at this member.
func (g *GMS) Tasks() Tasks {
	t := Tasks{
		ViewChange:   g.coord.vc != nil,
		Merge:        g.merge != nil,
		MergeHold:    g.hold != nil,
		StateRequest: g.xfer != nil,
		StateServing: len(g.prov),
		MemberCuts:   len(g.mcuts),
		OpenWindows:  len(g.open),
	}
	for _, c := range g.cuts {
		if !c.closed {
			t.Cuts++
		}
	}
	return t
}
