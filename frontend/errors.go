package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// apiError is an error a client can act on. It carries a Connect code (the
// suite-wide currency for errors) and, for bad input, the offending field, so the
// HTTP edge can render an OpenAI error object and the Connect service a status.
type apiError struct {
	code connect.Code
	// param names the request field at fault, in OpenAI's style ("messages[2].role").
	param string
	msg   string
	// oaiCode is OpenAI's machine-readable code, e.g. "model_not_found".
	oaiCode string
	// status overrides the HTTP status the code maps to (413, 405 have no code).
	status int
	// upstream marks an error that came from the backend, so an unclassified one is
	// a 502 (something behind us failed), not a 500 (we failed).
	upstream bool
}

func (e *apiError) Error() string { return e.msg }

func invalidField(param, format string, args ...any) *apiError {
	return &apiError{code: connect.CodeInvalidArgument, param: param, msg: fmt.Sprintf(format, args...)}
}

func modelNotFound(model, served string) *apiError {
	return &apiError{code: connect.CodeNotFound, param: "model", oaiCode: "model_not_found",
		msg: fmt.Sprintf("the model %q does not exist; this server serves %q", model, served)}
}

// asAPIError classifies any error. Errors the frontend made are already *apiError;
// anything else is an internal failure whose details stay in the log.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return &apiError{code: connect.CodeInternal, msg: "internal error"}
}

// backendError turns an error from the Backend (a Connect error, a grpc-go status,
// or a context error) into an apiError that keeps its code, so that "no capacity"
// reaches the client as 429 and "no workers" as 503 whatever transport services/
// used.
func backendError(err error) *apiError {
	code := connect.CodeUnknown
	msg := err.Error()
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		code, msg = ce.Code(), ce.Message()
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	default:
		if s, ok := status.FromError(err); ok && s.Code() != 0 {
			code, msg = connect.Code(s.Code()), s.Message()
		}
	}
	return &apiError{code: code, msg: "backend: " + msg, upstream: true}
}

// httpStatus maps the error to the status OpenAI clients expect; their retry logic
// keys on it (429 and 5xx are retried, 4xx are not).
func (e *apiError) httpStatus() int {
	if e.status != 0 {
		return e.status
	}
	switch e.code {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange, connect.CodeFailedPrecondition:
		return http.StatusBadRequest
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeAlreadyExists, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case connect.CodeCanceled:
		return statusClientClosed
	}
	if e.upstream {
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

func (e *apiError) openAIType() string {
	switch s := e.httpStatus(); {
	case s == http.StatusUnauthorized:
		return "authentication_error"
	case s == http.StatusForbidden:
		return "permission_error"
	case s == http.StatusTooManyRequests:
		return "rate_limit_error"
	case s >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// connectError renders e for the Connect service. The field is named in the
// message for people and in a google.rpc.BadRequest detail for programs, which
// Connect and gRPC clients both decode.
func (e *apiError) connectError() *connect.Error {
	code := e.code
	if e.status == http.StatusRequestEntityTooLarge {
		code = connect.CodeResourceExhausted
	}
	msg := e.msg
	if e.param != "" && !strings.Contains(msg, e.param) {
		msg = e.param + ": " + msg
	}
	ce := connect.NewError(code, errors.New(msg))
	if e.param != "" {
		if d, err := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: e.param, Description: e.msg},
		}}); err == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}

// openAIError is the body of every HTTP error: {"error": {...}}.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) openAI() openAIError {
	body := openAIErrorBody{Message: e.msg, Type: e.openAIType()}
	if e.param != "" {
		body.Param = &e.param
	}
	if e.oaiCode != "" {
		body.Code = &e.oaiCode
	}
	return openAIError{Error: body}
}

// statusClientClosed is nginx's 499 (client closed request), which Connect's own
// mapping uses for Canceled: the client left before the answer.
const statusClientClosed = 499

// jsonError turns a body encoding/json could not decode into a 400 naming the
// field, when it knows one.
func jsonError(err error) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &apiError{code: connect.CodeInvalidArgument, msg: fmt.Sprintf("request body is not valid JSON: %v (at byte %d)", syn, syn.Offset)}
	case errors.As(err, &typ) && typ.Field != "":
		// The path names Go's embedded struct too; clients know only JSON names.
		field := strings.TrimPrefix(strings.TrimPrefix(typ.Field, "samplingFields."), "unsupportedFields.")
		return invalidField(field, "%s: expected %s, got a JSON %s", field, jsonTypeName(typ.Type), typ.Value)
	case errors.As(err, &typ):
		return &apiError{code: connect.CodeInvalidArgument, msg: "request body must be a JSON object"}
	}
	return &apiError{code: connect.CodeInvalidArgument, msg: "request body could not be decoded: " + err.Error()}
}

func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	default:
		return "an object"
	}
}
