// Package plan is the pure machine of move plans (drain, rebalance,
// evacuate-all): a stored records.Plan and an event in, the next plan and
// the actions to perform out. The conductor's executor performs the
// actions (re-checking and starting a move, aborting one, finding a
// restarted move's migration) and feeds the results back as events; it
// also asks Select which pending moves may start now under the caps, and
// Summarise for the progress it reports. Nothing here reads a clock or
// does I/O: the time comes in the event.
//
// A plan's states:
//
//	recommended ──Approve──▶ approved ──Run──▶ running ──(every move ended)──▶ done | failed
//	     │                      │                 │
//	     └──Supersede/Cancel────┴──▶ superseded   └──Cancel──▶ (running moves finish or abort) ──▶ cancelled
//
// A move's states:
//
//	pending ──Begin──▶ starting ──Started──▶ running ──Ended(completed)──▶ done
//	   ▲                  │  ▲                  │
//	   │                  │  └─Ended(failed), cold fallback allowed (once)
//	   │                  ├──Refused──▶ skipped (no longer applies) | failed
//	   └─Lost (restart: no migration)   └──Ended(failed), attempts left ──▶ pending (retried elsewhere)
//	                                       Ended(failed), none left ──▶ failed
//	pending ──Cancel──▶ cancelled          Ended(cancelled) ──▶ cancelled
//
// A move is saved as starting before its migration is created, and the
// migration names the plan and move (records.Migration.PlanMove): a
// restarted executor finds a starting move's migration by that name
// (Resume → FindMigration → Started or Lost), so no move is started twice.
package plan
