package coretest

import "time"

// The events Counters counts besides removals, reconnects and migrations'
// ends, by what Events and Timed are asked: the event's name and labels.

func (c *Counters) MigrationTook(role, result string, d time.Duration) {
	c.time("migration "+role+" "+result, d)
}

func (c *Counters) MigrationDowntime(d time.Duration) { c.time("downtime", d) }

func (c *Counters) AgentCallRefused(whichCap, reason string) {
	c.count("agent_refused " + whichCap + " " + reason)
}

func (c *Counters) AgentCallWaited(d time.Duration) { c.time("agent_wait", d) }

func (c *Counters) TemplateClone(result string) { c.count("template_clone " + result) }

func (c *Counters) TemplateMakingEnded(result string) { c.count("template_making " + result) }

func (c *Counters) GuestBoot(result string) { c.count("guest_boot " + result) }

func (c *Counters) count(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events == nil {
		c.events = map[string]int{}
	}
	c.events[what]++
}

func (c *Counters) time(what string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timed == nil {
		c.timed = map[string][]time.Duration{}
	}
	c.timed[what] = append(c.timed[what], d)
}

// Events is how often what was counted: "agent_refused vm stuck",
// "template_clone restored", "template_making cancelled",
// "guest_boot late", ...
func (c *Counters) Events(what string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events[what]
}

// Timed are the durations observed of what: "migration source
// succeeded", "downtime", "agent_wait".
func (c *Counters) Timed(what string) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.timed[what]...)
}
