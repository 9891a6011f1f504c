package soak

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// question and answer mirror internal/localstack's FaultQuestion and
// FaultAnswer (built only with the sandstep_faults tag): the server asks
// before and after every phase invocation what to do.
type question struct {
	Function string `json:"function"`
	JobID    string `json:"job_id"`
	When     string `json:"when"`
	Error    string `json:"error,omitempty"`
}

type answer struct {
	Action    string `json:"action"` // "go", "fail" or "hold"
	ErrorType string `json:"error_type,omitempty"`
	Message   string `json:"message,omitempty"`
}

var carryOn = answer{Action: "go"}

// rule answers one invocation of one job's phase, once.
type rule struct {
	function, job, when string
	answer              answer
	hit                 chan struct{}
}

// controller is the server's fault controller: one-shot rules first, then
// decide (the soak's dice), else carry on.
type controller struct {
	*httptest.Server
	mu     sync.Mutex
	rules  []*rule
	decide func(question) answer
	asked  int
}

func newController(t testing.TB) *controller {
	c := &controller{}
	c.Server = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.Close)
	return c
}

func (c *controller) serve(w http.ResponseWriter, r *http.Request) {
	var q question
	if r.URL.Path != "/invoke" || json.NewDecoder(r.Body).Decode(&q) != nil {
		http.Error(w, "bad question", http.StatusBadRequest)
		return
	}
	a := c.answer(q)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(a)
}

func (c *controller) answer(q question) answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked++
	for i, r := range c.rules {
		if r.function == q.Function && r.job == q.JobID && r.when == q.When {
			c.rules = append(c.rules[:i], c.rules[i+1:]...)
			close(r.hit)
			return r.answer
		}
	}
	if c.decide != nil {
		return c.decide(q)
	}
	return carryOn
}

// once answers the next invocation of function for job at when ("before"
// or "after" the handler) with a; the channel closes when it is answered.
func (c *controller) once(function, job, when string, a answer) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The phases see the job's key, not the id the client gave.
	r := &rule{function: function, job: jobKey(job), when: when, answer: a, hit: make(chan struct{})}
	c.rules = append(c.rules, r)
	return r.hit
}

func (c *controller) setDecide(f func(question) answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.decide = f
}

// clear drops the rules no invocation matched.
func (c *controller) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rules = nil
}
