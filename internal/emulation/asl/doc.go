// Package asl runs Amazon States Language state machines locally: the same
// JSONPath definitions Step Functions runs, with Task states handled by
// in-process Lambda handlers.
//
// Load parses a definition, fills its ${Name} placeholders, validates it and
// refuses whatever the engine does not implement (JSONata, variables,
// Distributed Map, callbacks, activities, integrations other than Lambda), so
// a difference from Step Functions shows up as a load error rather than as a
// silently different run. Machine.Start runs an execution on its own
// goroutine; Parallel branches and Map iterations get goroutines of their
// own. One Machine serves any number of concurrent executions.
//
// Where the developer guide and the service disagree, the engine follows the
// service as recorded against AWS by LocalStack's validated snapshot tests:
//
//   - A task result over 256 KiB fails the task with States.DataLimitExceeded,
//     which Retry and Catch see, States.ALL included. A state input or output
//     over 256 KiB ends the execution and no catcher sees it.
//   - A JSONPath in Parameters, ResultSelector, InputPath, OutputPath,
//     ResultPath or a Choice rule that selects nothing is States.Runtime,
//     which ends the execution (States.ALL does not catch it). This engine
//     also reports failing intrinsic functions and a Lambda response that is
//     not JSON as States.Runtime.
//   - A function's error is named after its errorType and its cause is the
//     function's whole error payload as JSON text
//     ({"errorMessage":...,"errorType":...}).
//   - A Parallel or Map state fails with the error of the branch or iteration
//     that failed, not States.BranchFailed.
//
// Choices the service leaves open: an inline Map runs at most 40 iterations
// at a time; with ToleratedFailureCount or ToleratedFailurePercentage a
// failed item's slot in the Map's output holds its error output
// ({"Error","Cause"}); States.MathRandom returns start <= n < end.
//
// The history mirrors GetExecutionHistory: Lambda ARN tasks record
// LambdaFunction* events and arn:aws:states:::lambda:invoke tasks Task*
// events. Two events are the engine's own: StateRetryScheduled records each
// retry with its delay, and ExecutionResumed begins the history of an
// execution taken up again after its host died.
//
// Durability is the host's: WithCheckpoints reports every top-level state
// boundary (with what a resume needs: the execution's context, the state to
// run, its input and retry counters), and Machine.Resume takes an execution
// up from such a checkpoint. Parallel branches and Map iterations are not
// checkpointed: a resumed Parallel or Map state runs again whole.
package asl
