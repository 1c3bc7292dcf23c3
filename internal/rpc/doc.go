// Package rpc carries keel's internal interfaces over the bus: the
// conductor's calls to an agent (conductor.ComputeAPI), an agent's calls
// to another (compute.Peer), an agent's reports to the conductor
// (compute.Reporter), and the agent's access to the store through the
// server (compute.TrackerStore, host registration, heartbeats). Agents
// never open the database: everything they read or write goes through the
// servers, as Nova's computes go through the conductor.
//
// Errors keep their type across the bus: a store "not found", a placement
// generation conflict, a capacity refusal and an invalid request come back
// as the same typed errors the caller would get in one process, so the
// core's error handling does not change with the deployment.
package rpc
