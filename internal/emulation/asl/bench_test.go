package asl

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// defOverhead has the deep-research machine's shape: seven Task states in a
// line, each with the production Retry and Catch, a Choice after
// provisioning and a Choice loop that crawls three rounds.
var defOverhead = asl("overhead", func() string {
	task := func(name, next string) string {
		return fmt.Sprintf(`"%s": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:%s",
      "Parameters": {"job_id.$": "$.job_id"}, "ResultPath": "$.%s", "TimeoutSeconds": 300,
      "Retry": [{"ErrorEquals": ["Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException", "Lambda.TooManyRequestsException"],
                 "IntervalSeconds": 1, "MaxAttempts": 3, "BackoffRate": 2, "MaxDelaySeconds": 20, "JitterStrategy": "FULL"}],
      "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Failed"}],
      "Next": "%s"}`, name, name, strings.ToLower(name), next)
	}
	return `{"StartAt": "Discover", "TimeoutSeconds": 3600, "States": {` + strings.Join([]string{
		task("Discover", "Provision"),
		task("Provision", "HasSandbox"),
		`"HasSandbox": {"Type": "Choice", "Choices": [{"Variable": "$.provision.ok", "BooleanEquals": true, "Next": "Crawl"}], "Default": "Report"}`,
		task("Crawl", "CrawlDone"),
		`"CrawlDone": {"Type": "Choice", "Choices": [{"Variable": "$.round.n", "NumericLessThan": 3, "Next": "NextRound"}], "Default": "Summarize"}`,
		`"NextRound": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.round.n, 1)"}, "ResultPath": "$.round", "Next": "Crawl"}`,
		task("Summarize", "Report"),
		task("Report", "Publish"),
		task("Publish", "Cleanup"),
		task("Cleanup", "Done"),
		`"Done": {"Type": "Succeed"}`,
		`"Failed": {"Type": "Fail", "ErrorPath": "$.error.Error", "CausePath": "$.error.Cause"}`,
	}, ",\n") + `}}`
}())

// BenchmarkEngineOverhead measures what the local engine adds to a job whose
// phases do nothing (DESIGN budget: 25 ms per job).
func BenchmarkEngineOverhead(b *testing.B) {
	m := mustLoad(b, defOverhead)
	inv := handlers{}
	for _, n := range []string{"Discover", "Provision", "Crawl", "Summarize", "Report", "Publish", "Cleanup"} {
		inv["arn:aws:lambda:us-east-1:123456789012:function:"+n] = constant(`{"ok": true}`)
	}
	input := []byte(`{"job_id": "0f8fad5b-d9cb-469f-a165-70867728950e", "round": {"n": 1}}`)
	ctx := context.Background()
	var events int
	i := 0
	start := time.Now()
	for b.Loop() {
		x, err := m.Start(ctx, fmt.Sprintf("job-%d", i), input, inv)
		if err != nil {
			b.Fatal(err)
		}
		res, err := x.Wait(ctx)
		if err != nil || res.Status != StatusSucceeded {
			b.Fatalf("%v %+v", err, res)
		}
		events = len(x.History())
		i++
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(i), "ms/job")
	b.ReportMetric(float64(events), "events/job")
}
