// Package members runs whole nakcast members, gms membership over the
// nakack protocol, as nodes of the deterministic simulator (package sim).
// It is its own package because it imports gms, and gms's own tests import
// sim: sim itself must not import gms.
//
// A Cluster is one simulated group: a sim.Sim, the members on it (Node: a
// gms.GMS whose every incarnation gets a fresh nakack.Protocol and a fresh
// App) and the sim.Ledger of every message sent. Tests drive it with joins,
// leaves, crashes, partitions, state transfers, forced purges and traffic,
// and check it with the predicates (Converged, Quiet, Delivered) and the
// checks of check.go.
//
// # What an App checks as it goes
//
// Every incarnation's App is the application of that member: it keeps, per
// sender incarnation, the stream of what the protocol delivered and
// reported lost, and fails the simulation at the first event that breaks
// the per-sender contract: a delivery that is not the next whole message
// the sender sent (by its payload, from the ledger), a lost range that does
// not start where the stream stands, one that reaches beyond what the
// sender sent, or one of a sender still in the reporter's view that covers
// a seqno nobody can be said to have purged (above the sender's own purge
// point and every merge digest's Low for it, widened to whole messages). A
// stream starts at 1, at a join digest's point, or at an installed state's
// point.
//
// # What the checks of a settled group add
//
// The survivors of one cut (the members whose view dropped a departed
// sender in the same view) end with the same stream of it, lost ranges
// with the same boundaries; two members that report the same run of a
// sender's seqnos lost report it in the same ranges; a state transfer's
// requester and provider end with the same application state (the hash
// chain of every delivery) for every sender, up to the first range either
// was told lost since the transfer (for the provider, above the state's
// point: a forced purge may make it lose what the requester holds); and
// every member of the final view delivered or was told lost every
// message of every sender of that view (and of departed senders up to
// their cuts), the group purges everything once traffic stops, and
// retransmission traffic ends.
package members
