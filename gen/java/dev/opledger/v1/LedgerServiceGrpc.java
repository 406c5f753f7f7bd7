package dev.opledger.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * LedgerService is the execution ledger for AI agents' side-effecting tool
 * calls. An agent Prepares an operation, an approver Approves exactly that
 * operation, the agent Executes it, and anyone in the tenant may Get or
 * Reconcile it. One approved operation produces at most one downstream
 * effect, and every repeated call is answered from the ledger.
 * Every call carries `authorization: Bearer &lt;api key&gt;` metadata. The tenant
 * is taken from the key, never from a request field; another tenant's
 * operation is reported as NOT_FOUND. Errors are gRPC statuses carrying
 * exactly one google.rpc.ErrorInfo whose domain is "opledger.v1" and whose
 * reason is an ErrorReason name without its prefix (for example
 * "IDEMPOTENCY_KEY_REUSED").
 * </pre>
 */
@io.grpc.stub.annotations.GrpcGenerated
public final class LedgerServiceGrpc {

  private LedgerServiceGrpc() {}

  public static final java.lang.String SERVICE_NAME = "opledger.v1.LedgerService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.opledger.v1.PrepareRequest,
      dev.opledger.v1.PrepareResponse> getPrepareMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Prepare",
      requestType = dev.opledger.v1.PrepareRequest.class,
      responseType = dev.opledger.v1.PrepareResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.opledger.v1.PrepareRequest,
      dev.opledger.v1.PrepareResponse> getPrepareMethod() {
    io.grpc.MethodDescriptor<dev.opledger.v1.PrepareRequest, dev.opledger.v1.PrepareResponse> getPrepareMethod;
    if ((getPrepareMethod = LedgerServiceGrpc.getPrepareMethod) == null) {
      synchronized (LedgerServiceGrpc.class) {
        if ((getPrepareMethod = LedgerServiceGrpc.getPrepareMethod) == null) {
          LedgerServiceGrpc.getPrepareMethod = getPrepareMethod =
              io.grpc.MethodDescriptor.<dev.opledger.v1.PrepareRequest, dev.opledger.v1.PrepareResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Prepare"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.PrepareRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.PrepareResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LedgerServiceMethodDescriptorSupplier("Prepare"))
              .build();
        }
      }
    }
    return getPrepareMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.opledger.v1.ApproveRequest,
      dev.opledger.v1.ApproveResponse> getApproveMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Approve",
      requestType = dev.opledger.v1.ApproveRequest.class,
      responseType = dev.opledger.v1.ApproveResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.opledger.v1.ApproveRequest,
      dev.opledger.v1.ApproveResponse> getApproveMethod() {
    io.grpc.MethodDescriptor<dev.opledger.v1.ApproveRequest, dev.opledger.v1.ApproveResponse> getApproveMethod;
    if ((getApproveMethod = LedgerServiceGrpc.getApproveMethod) == null) {
      synchronized (LedgerServiceGrpc.class) {
        if ((getApproveMethod = LedgerServiceGrpc.getApproveMethod) == null) {
          LedgerServiceGrpc.getApproveMethod = getApproveMethod =
              io.grpc.MethodDescriptor.<dev.opledger.v1.ApproveRequest, dev.opledger.v1.ApproveResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Approve"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ApproveRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ApproveResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LedgerServiceMethodDescriptorSupplier("Approve"))
              .build();
        }
      }
    }
    return getApproveMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.opledger.v1.ExecuteRequest,
      dev.opledger.v1.ExecuteResponse> getExecuteMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Execute",
      requestType = dev.opledger.v1.ExecuteRequest.class,
      responseType = dev.opledger.v1.ExecuteResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.opledger.v1.ExecuteRequest,
      dev.opledger.v1.ExecuteResponse> getExecuteMethod() {
    io.grpc.MethodDescriptor<dev.opledger.v1.ExecuteRequest, dev.opledger.v1.ExecuteResponse> getExecuteMethod;
    if ((getExecuteMethod = LedgerServiceGrpc.getExecuteMethod) == null) {
      synchronized (LedgerServiceGrpc.class) {
        if ((getExecuteMethod = LedgerServiceGrpc.getExecuteMethod) == null) {
          LedgerServiceGrpc.getExecuteMethod = getExecuteMethod =
              io.grpc.MethodDescriptor.<dev.opledger.v1.ExecuteRequest, dev.opledger.v1.ExecuteResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Execute"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ExecuteRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ExecuteResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LedgerServiceMethodDescriptorSupplier("Execute"))
              .build();
        }
      }
    }
    return getExecuteMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.opledger.v1.GetRequest,
      dev.opledger.v1.GetResponse> getGetMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Get",
      requestType = dev.opledger.v1.GetRequest.class,
      responseType = dev.opledger.v1.GetResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.opledger.v1.GetRequest,
      dev.opledger.v1.GetResponse> getGetMethod() {
    io.grpc.MethodDescriptor<dev.opledger.v1.GetRequest, dev.opledger.v1.GetResponse> getGetMethod;
    if ((getGetMethod = LedgerServiceGrpc.getGetMethod) == null) {
      synchronized (LedgerServiceGrpc.class) {
        if ((getGetMethod = LedgerServiceGrpc.getGetMethod) == null) {
          LedgerServiceGrpc.getGetMethod = getGetMethod =
              io.grpc.MethodDescriptor.<dev.opledger.v1.GetRequest, dev.opledger.v1.GetResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Get"))
              .setSafe(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.GetRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.GetResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LedgerServiceMethodDescriptorSupplier("Get"))
              .build();
        }
      }
    }
    return getGetMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.opledger.v1.ReconcileRequest,
      dev.opledger.v1.ReconcileResponse> getReconcileMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Reconcile",
      requestType = dev.opledger.v1.ReconcileRequest.class,
      responseType = dev.opledger.v1.ReconcileResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.opledger.v1.ReconcileRequest,
      dev.opledger.v1.ReconcileResponse> getReconcileMethod() {
    io.grpc.MethodDescriptor<dev.opledger.v1.ReconcileRequest, dev.opledger.v1.ReconcileResponse> getReconcileMethod;
    if ((getReconcileMethod = LedgerServiceGrpc.getReconcileMethod) == null) {
      synchronized (LedgerServiceGrpc.class) {
        if ((getReconcileMethod = LedgerServiceGrpc.getReconcileMethod) == null) {
          LedgerServiceGrpc.getReconcileMethod = getReconcileMethod =
              io.grpc.MethodDescriptor.<dev.opledger.v1.ReconcileRequest, dev.opledger.v1.ReconcileResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Reconcile"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ReconcileRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ReconcileResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LedgerServiceMethodDescriptorSupplier("Reconcile"))
              .build();
        }
      }
    }
    return getReconcileMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.opledger.v1.CancelRequest,
      dev.opledger.v1.CancelResponse> getCancelMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Cancel",
      requestType = dev.opledger.v1.CancelRequest.class,
      responseType = dev.opledger.v1.CancelResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.opledger.v1.CancelRequest,
      dev.opledger.v1.CancelResponse> getCancelMethod() {
    io.grpc.MethodDescriptor<dev.opledger.v1.CancelRequest, dev.opledger.v1.CancelResponse> getCancelMethod;
    if ((getCancelMethod = LedgerServiceGrpc.getCancelMethod) == null) {
      synchronized (LedgerServiceGrpc.class) {
        if ((getCancelMethod = LedgerServiceGrpc.getCancelMethod) == null) {
          LedgerServiceGrpc.getCancelMethod = getCancelMethod =
              io.grpc.MethodDescriptor.<dev.opledger.v1.CancelRequest, dev.opledger.v1.CancelResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Cancel"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.CancelRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.CancelResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LedgerServiceMethodDescriptorSupplier("Cancel"))
              .build();
        }
      }
    }
    return getCancelMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.opledger.v1.ListToolsRequest,
      dev.opledger.v1.ListToolsResponse> getListToolsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListTools",
      requestType = dev.opledger.v1.ListToolsRequest.class,
      responseType = dev.opledger.v1.ListToolsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.opledger.v1.ListToolsRequest,
      dev.opledger.v1.ListToolsResponse> getListToolsMethod() {
    io.grpc.MethodDescriptor<dev.opledger.v1.ListToolsRequest, dev.opledger.v1.ListToolsResponse> getListToolsMethod;
    if ((getListToolsMethod = LedgerServiceGrpc.getListToolsMethod) == null) {
      synchronized (LedgerServiceGrpc.class) {
        if ((getListToolsMethod = LedgerServiceGrpc.getListToolsMethod) == null) {
          LedgerServiceGrpc.getListToolsMethod = getListToolsMethod =
              io.grpc.MethodDescriptor.<dev.opledger.v1.ListToolsRequest, dev.opledger.v1.ListToolsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListTools"))
              .setSafe(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ListToolsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ListToolsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LedgerServiceMethodDescriptorSupplier("ListTools"))
              .build();
        }
      }
    }
    return getListToolsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.opledger.v1.ListOperationsRequest,
      dev.opledger.v1.ListOperationsResponse> getListOperationsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListOperations",
      requestType = dev.opledger.v1.ListOperationsRequest.class,
      responseType = dev.opledger.v1.ListOperationsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.opledger.v1.ListOperationsRequest,
      dev.opledger.v1.ListOperationsResponse> getListOperationsMethod() {
    io.grpc.MethodDescriptor<dev.opledger.v1.ListOperationsRequest, dev.opledger.v1.ListOperationsResponse> getListOperationsMethod;
    if ((getListOperationsMethod = LedgerServiceGrpc.getListOperationsMethod) == null) {
      synchronized (LedgerServiceGrpc.class) {
        if ((getListOperationsMethod = LedgerServiceGrpc.getListOperationsMethod) == null) {
          LedgerServiceGrpc.getListOperationsMethod = getListOperationsMethod =
              io.grpc.MethodDescriptor.<dev.opledger.v1.ListOperationsRequest, dev.opledger.v1.ListOperationsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListOperations"))
              .setSafe(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ListOperationsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.opledger.v1.ListOperationsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LedgerServiceMethodDescriptorSupplier("ListOperations"))
              .build();
        }
      }
    }
    return getListOperationsMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static LedgerServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LedgerServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LedgerServiceStub>() {
        @java.lang.Override
        public LedgerServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LedgerServiceStub(channel, callOptions);
        }
      };
    return LedgerServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports all types of calls on the service
   */
  public static LedgerServiceBlockingV2Stub newBlockingV2Stub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LedgerServiceBlockingV2Stub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LedgerServiceBlockingV2Stub>() {
        @java.lang.Override
        public LedgerServiceBlockingV2Stub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LedgerServiceBlockingV2Stub(channel, callOptions);
        }
      };
    return LedgerServiceBlockingV2Stub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static LedgerServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LedgerServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LedgerServiceBlockingStub>() {
        @java.lang.Override
        public LedgerServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LedgerServiceBlockingStub(channel, callOptions);
        }
      };
    return LedgerServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static LedgerServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LedgerServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LedgerServiceFutureStub>() {
        @java.lang.Override
        public LedgerServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LedgerServiceFutureStub(channel, callOptions);
        }
      };
    return LedgerServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * LedgerService is the execution ledger for AI agents' side-effecting tool
   * calls. An agent Prepares an operation, an approver Approves exactly that
   * operation, the agent Executes it, and anyone in the tenant may Get or
   * Reconcile it. One approved operation produces at most one downstream
   * effect, and every repeated call is answered from the ledger.
   * Every call carries `authorization: Bearer &lt;api key&gt;` metadata. The tenant
   * is taken from the key, never from a request field; another tenant's
   * operation is reported as NOT_FOUND. Errors are gRPC statuses carrying
   * exactly one google.rpc.ErrorInfo whose domain is "opledger.v1" and whose
   * reason is an ErrorReason name without its prefix (for example
   * "IDEMPOTENCY_KEY_REUSED").
   * </pre>
   */
  public interface AsyncService {

    /**
     * <pre>
     * Prepare records a proposed tool call as an operation, or returns the one
     * already recorded under the same idempotency key.
     * Requires the `idempotency-key` metadata (1 to 255 printable ASCII
     * characters, exactly one value) and the `agent` role. The key is scoped by
     * (tenant, tool). The tool must exist and the args must match its JSON
     * Schema; a request that fails validation stores nothing and reserves no
     * key.
     * The same key with the same fingerprint returns the existing operation
     * with `replayed = true`. The same key with a different fingerprint (for
     * example a changed amount) fails with ALREADY_EXISTS and reason
     * IDEMPOTENCY_KEY_REUSED and leaves the stored operation unchanged.
     * Concurrent twins never create a second operation.
     * A new operation starts in STATE_AWAITING_APPROVAL when its tool requires
     * approval, otherwise in STATE_READY.
     * With `execute`, Prepare also does what an Execute of the operation would
     * do, in the same call (the one-call path for tools that need no
     * approval): see PrepareRequest.execute.
     * </pre>
     */
    default void prepare(dev.opledger.v1.PrepareRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.PrepareResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getPrepareMethod(), responseObserver);
    }

    /**
     * <pre>
     * Approve records a person's decision on exactly one operation, bound to
     * the fingerprint the approver was shown.
     * Requires the `approver` role in the operation's tenant. The principal
     * that prepared the operation may not approve it (PERMISSION_DENIED,
     * SELF_APPROVAL_FORBIDDEN). A fingerprint that is not the operation's fails
     * with FAILED_PRECONDITION and APPROVAL_FINGERPRINT_MISMATCH and changes
     * nothing. An approval expires after the tool's TTL; an expired approval
     * may be approved again. Repeating the same decision is idempotent
     * (`replayed = true`); the opposite decision fails with FAILED_PRECONDITION
     * and APPROVAL_CONFLICT. DECISION_DENY moves the operation to
     * STATE_REJECTED.
     * </pre>
     */
    default void approve(dev.opledger.v1.ApproveRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ApproveResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getApproveMethod(), responseObserver);
    }

    /**
     * <pre>
     * Execute performs the operation's downstream call at most once and
     * answers from the ledger on every repeat.
     * Requires the `agent` role. By state:
     *   - READY: this call claims the operation (attempts + 1, fence + 1, a
     *     lease), calls the downstream with the operation's stable
     *     downstream key and records the outcome.
     *   - EXECUTING: returns the operation as it is (pending), or waits up to
     *     `wait` for the outcome.
     *   - SUCCEEDED, FAILED: returns the stored outcome with `replayed = true`
     *     and makes no downstream call.
     *   - OUTCOME_UNKNOWN: returns that state; never submits a new request.
     *     Use Reconcile.
     *   - AWAITING_APPROVAL, an expired approval, REJECTED, CANCELLED:
     *     FAILED_PRECONDITION with APPROVAL_REQUIRED, APPROVAL_EXPIRED,
     *     OPERATION_REJECTED or OPERATION_CANCELLED.
     * </pre>
     */
    default void execute(dev.opledger.v1.ExecuteRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ExecuteResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getExecuteMethod(), responseObserver);
    }

    /**
     * <pre>
     * Get returns an operation and, when asked, its event log. Read-only.
     * Requires any role in the operation's tenant.
     * </pre>
     */
    default void get(dev.opledger.v1.GetRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.GetResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetMethod(), responseObserver);
    }

    /**
     * <pre>
     * Reconcile resolves an operation whose outcome is unknown, or which is
     * EXECUTING with an expired lease, by looking the downstream up by the
     * operation's downstream key: found → the real outcome; a trustworthy
     * not-found → READY again (the next Execute resubmits with the same key);
     * inconclusive → unchanged, and `detail` says why.
     * Requires the `agent` or `operator` role. A `resolution` (manual outcome)
     * requires the `operator` role and is recorded in the event log. On an
     * operation that needs no reconciliation it returns the operation
     * unchanged.
     * </pre>
     */
    default void reconcile(dev.opledger.v1.ReconcileRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ReconcileResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReconcileMethod(), responseObserver);
    }

    /**
     * <pre>
     * Cancel withdraws an operation that has not been executed: from
     * AWAITING_APPROVAL or READY it becomes STATE_CANCELLED, and Execute then
     * refuses it. Once an executor claimed it, it can no longer be cancelled
     * (FAILED_PRECONDITION, CANCEL_NOT_APPLICABLE): the effect may be under
     * way, and undoing it is a new, compensating operation. Repeating a
     * Cancel is `replayed = true`.
     * Requires the `agent` or `operator` role.
     * </pre>
     */
    default void cancel(dev.opledger.v1.CancelRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.CancelResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCancelMethod(), responseObserver);
    }

    /**
     * <pre>
     * ListTools returns every tool this server is configured with, from the
     * same tools file the ledger enforces, so an agent runtime can build its
     * model's tool list (names, descriptions, argument schemas) without
     * copying them by hand. Read-only.
     * Requires any role in a tenant; every tenant sees the same tools.
     * </pre>
     */
    default void listTools(dev.opledger.v1.ListToolsRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ListToolsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListToolsMethod(), responseObserver);
    }

    /**
     * <pre>
     * ListOperations lists the caller's tenant's operations, newest first,
     * optionally only those in some states or of one tool, a page at a time
     * (AIP-158). Read-only; served from an index.
     * `next_page_token` is opaque and bound to the caller's tenant and to the
     * request's filters: a token that was altered, comes from another tenant
     * or is sent with other `states` or `tool` fails with INVALID_ARGUMENT and
     * reason FIELD_INVALID (field `page_token`). `page_size` may change
     * between pages.
     * Requires the `agent`, `approver` or `operator` role.
     * </pre>
     */
    default void listOperations(dev.opledger.v1.ListOperationsRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ListOperationsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListOperationsMethod(), responseObserver);
    }
  }

  /**
   * Base class for the server implementation of the service LedgerService.
   * <pre>
   * LedgerService is the execution ledger for AI agents' side-effecting tool
   * calls. An agent Prepares an operation, an approver Approves exactly that
   * operation, the agent Executes it, and anyone in the tenant may Get or
   * Reconcile it. One approved operation produces at most one downstream
   * effect, and every repeated call is answered from the ledger.
   * Every call carries `authorization: Bearer &lt;api key&gt;` metadata. The tenant
   * is taken from the key, never from a request field; another tenant's
   * operation is reported as NOT_FOUND. Errors are gRPC statuses carrying
   * exactly one google.rpc.ErrorInfo whose domain is "opledger.v1" and whose
   * reason is an ErrorReason name without its prefix (for example
   * "IDEMPOTENCY_KEY_REUSED").
   * </pre>
   */
  public static abstract class LedgerServiceImplBase
      implements io.grpc.BindableService, AsyncService {

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return LedgerServiceGrpc.bindService(this);
    }
  }

  /**
   * A stub to allow clients to do asynchronous rpc calls to service LedgerService.
   * <pre>
   * LedgerService is the execution ledger for AI agents' side-effecting tool
   * calls. An agent Prepares an operation, an approver Approves exactly that
   * operation, the agent Executes it, and anyone in the tenant may Get or
   * Reconcile it. One approved operation produces at most one downstream
   * effect, and every repeated call is answered from the ledger.
   * Every call carries `authorization: Bearer &lt;api key&gt;` metadata. The tenant
   * is taken from the key, never from a request field; another tenant's
   * operation is reported as NOT_FOUND. Errors are gRPC statuses carrying
   * exactly one google.rpc.ErrorInfo whose domain is "opledger.v1" and whose
   * reason is an ErrorReason name without its prefix (for example
   * "IDEMPOTENCY_KEY_REUSED").
   * </pre>
   */
  public static final class LedgerServiceStub
      extends io.grpc.stub.AbstractAsyncStub<LedgerServiceStub> {
    private LedgerServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LedgerServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LedgerServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * Prepare records a proposed tool call as an operation, or returns the one
     * already recorded under the same idempotency key.
     * Requires the `idempotency-key` metadata (1 to 255 printable ASCII
     * characters, exactly one value) and the `agent` role. The key is scoped by
     * (tenant, tool). The tool must exist and the args must match its JSON
     * Schema; a request that fails validation stores nothing and reserves no
     * key.
     * The same key with the same fingerprint returns the existing operation
     * with `replayed = true`. The same key with a different fingerprint (for
     * example a changed amount) fails with ALREADY_EXISTS and reason
     * IDEMPOTENCY_KEY_REUSED and leaves the stored operation unchanged.
     * Concurrent twins never create a second operation.
     * A new operation starts in STATE_AWAITING_APPROVAL when its tool requires
     * approval, otherwise in STATE_READY.
     * With `execute`, Prepare also does what an Execute of the operation would
     * do, in the same call (the one-call path for tools that need no
     * approval): see PrepareRequest.execute.
     * </pre>
     */
    public void prepare(dev.opledger.v1.PrepareRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.PrepareResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getPrepareMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Approve records a person's decision on exactly one operation, bound to
     * the fingerprint the approver was shown.
     * Requires the `approver` role in the operation's tenant. The principal
     * that prepared the operation may not approve it (PERMISSION_DENIED,
     * SELF_APPROVAL_FORBIDDEN). A fingerprint that is not the operation's fails
     * with FAILED_PRECONDITION and APPROVAL_FINGERPRINT_MISMATCH and changes
     * nothing. An approval expires after the tool's TTL; an expired approval
     * may be approved again. Repeating the same decision is idempotent
     * (`replayed = true`); the opposite decision fails with FAILED_PRECONDITION
     * and APPROVAL_CONFLICT. DECISION_DENY moves the operation to
     * STATE_REJECTED.
     * </pre>
     */
    public void approve(dev.opledger.v1.ApproveRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ApproveResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getApproveMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Execute performs the operation's downstream call at most once and
     * answers from the ledger on every repeat.
     * Requires the `agent` role. By state:
     *   - READY: this call claims the operation (attempts + 1, fence + 1, a
     *     lease), calls the downstream with the operation's stable
     *     downstream key and records the outcome.
     *   - EXECUTING: returns the operation as it is (pending), or waits up to
     *     `wait` for the outcome.
     *   - SUCCEEDED, FAILED: returns the stored outcome with `replayed = true`
     *     and makes no downstream call.
     *   - OUTCOME_UNKNOWN: returns that state; never submits a new request.
     *     Use Reconcile.
     *   - AWAITING_APPROVAL, an expired approval, REJECTED, CANCELLED:
     *     FAILED_PRECONDITION with APPROVAL_REQUIRED, APPROVAL_EXPIRED,
     *     OPERATION_REJECTED or OPERATION_CANCELLED.
     * </pre>
     */
    public void execute(dev.opledger.v1.ExecuteRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ExecuteResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getExecuteMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Get returns an operation and, when asked, its event log. Read-only.
     * Requires any role in the operation's tenant.
     * </pre>
     */
    public void get(dev.opledger.v1.GetRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.GetResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Reconcile resolves an operation whose outcome is unknown, or which is
     * EXECUTING with an expired lease, by looking the downstream up by the
     * operation's downstream key: found → the real outcome; a trustworthy
     * not-found → READY again (the next Execute resubmits with the same key);
     * inconclusive → unchanged, and `detail` says why.
     * Requires the `agent` or `operator` role. A `resolution` (manual outcome)
     * requires the `operator` role and is recorded in the event log. On an
     * operation that needs no reconciliation it returns the operation
     * unchanged.
     * </pre>
     */
    public void reconcile(dev.opledger.v1.ReconcileRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ReconcileResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReconcileMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Cancel withdraws an operation that has not been executed: from
     * AWAITING_APPROVAL or READY it becomes STATE_CANCELLED, and Execute then
     * refuses it. Once an executor claimed it, it can no longer be cancelled
     * (FAILED_PRECONDITION, CANCEL_NOT_APPLICABLE): the effect may be under
     * way, and undoing it is a new, compensating operation. Repeating a
     * Cancel is `replayed = true`.
     * Requires the `agent` or `operator` role.
     * </pre>
     */
    public void cancel(dev.opledger.v1.CancelRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.CancelResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCancelMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ListTools returns every tool this server is configured with, from the
     * same tools file the ledger enforces, so an agent runtime can build its
     * model's tool list (names, descriptions, argument schemas) without
     * copying them by hand. Read-only.
     * Requires any role in a tenant; every tenant sees the same tools.
     * </pre>
     */
    public void listTools(dev.opledger.v1.ListToolsRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ListToolsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListToolsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ListOperations lists the caller's tenant's operations, newest first,
     * optionally only those in some states or of one tool, a page at a time
     * (AIP-158). Read-only; served from an index.
     * `next_page_token` is opaque and bound to the caller's tenant and to the
     * request's filters: a token that was altered, comes from another tenant
     * or is sent with other `states` or `tool` fails with INVALID_ARGUMENT and
     * reason FIELD_INVALID (field `page_token`). `page_size` may change
     * between pages.
     * Requires the `agent`, `approver` or `operator` role.
     * </pre>
     */
    public void listOperations(dev.opledger.v1.ListOperationsRequest request,
        io.grpc.stub.StreamObserver<dev.opledger.v1.ListOperationsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListOperationsMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * A stub to allow clients to do synchronous rpc calls to service LedgerService.
   * <pre>
   * LedgerService is the execution ledger for AI agents' side-effecting tool
   * calls. An agent Prepares an operation, an approver Approves exactly that
   * operation, the agent Executes it, and anyone in the tenant may Get or
   * Reconcile it. One approved operation produces at most one downstream
   * effect, and every repeated call is answered from the ledger.
   * Every call carries `authorization: Bearer &lt;api key&gt;` metadata. The tenant
   * is taken from the key, never from a request field; another tenant's
   * operation is reported as NOT_FOUND. Errors are gRPC statuses carrying
   * exactly one google.rpc.ErrorInfo whose domain is "opledger.v1" and whose
   * reason is an ErrorReason name without its prefix (for example
   * "IDEMPOTENCY_KEY_REUSED").
   * </pre>
   */
  public static final class LedgerServiceBlockingV2Stub
      extends io.grpc.stub.AbstractBlockingStub<LedgerServiceBlockingV2Stub> {
    private LedgerServiceBlockingV2Stub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LedgerServiceBlockingV2Stub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LedgerServiceBlockingV2Stub(channel, callOptions);
    }

    /**
     * <pre>
     * Prepare records a proposed tool call as an operation, or returns the one
     * already recorded under the same idempotency key.
     * Requires the `idempotency-key` metadata (1 to 255 printable ASCII
     * characters, exactly one value) and the `agent` role. The key is scoped by
     * (tenant, tool). The tool must exist and the args must match its JSON
     * Schema; a request that fails validation stores nothing and reserves no
     * key.
     * The same key with the same fingerprint returns the existing operation
     * with `replayed = true`. The same key with a different fingerprint (for
     * example a changed amount) fails with ALREADY_EXISTS and reason
     * IDEMPOTENCY_KEY_REUSED and leaves the stored operation unchanged.
     * Concurrent twins never create a second operation.
     * A new operation starts in STATE_AWAITING_APPROVAL when its tool requires
     * approval, otherwise in STATE_READY.
     * With `execute`, Prepare also does what an Execute of the operation would
     * do, in the same call (the one-call path for tools that need no
     * approval): see PrepareRequest.execute.
     * </pre>
     */
    public dev.opledger.v1.PrepareResponse prepare(dev.opledger.v1.PrepareRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getPrepareMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Approve records a person's decision on exactly one operation, bound to
     * the fingerprint the approver was shown.
     * Requires the `approver` role in the operation's tenant. The principal
     * that prepared the operation may not approve it (PERMISSION_DENIED,
     * SELF_APPROVAL_FORBIDDEN). A fingerprint that is not the operation's fails
     * with FAILED_PRECONDITION and APPROVAL_FINGERPRINT_MISMATCH and changes
     * nothing. An approval expires after the tool's TTL; an expired approval
     * may be approved again. Repeating the same decision is idempotent
     * (`replayed = true`); the opposite decision fails with FAILED_PRECONDITION
     * and APPROVAL_CONFLICT. DECISION_DENY moves the operation to
     * STATE_REJECTED.
     * </pre>
     */
    public dev.opledger.v1.ApproveResponse approve(dev.opledger.v1.ApproveRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getApproveMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Execute performs the operation's downstream call at most once and
     * answers from the ledger on every repeat.
     * Requires the `agent` role. By state:
     *   - READY: this call claims the operation (attempts + 1, fence + 1, a
     *     lease), calls the downstream with the operation's stable
     *     downstream key and records the outcome.
     *   - EXECUTING: returns the operation as it is (pending), or waits up to
     *     `wait` for the outcome.
     *   - SUCCEEDED, FAILED: returns the stored outcome with `replayed = true`
     *     and makes no downstream call.
     *   - OUTCOME_UNKNOWN: returns that state; never submits a new request.
     *     Use Reconcile.
     *   - AWAITING_APPROVAL, an expired approval, REJECTED, CANCELLED:
     *     FAILED_PRECONDITION with APPROVAL_REQUIRED, APPROVAL_EXPIRED,
     *     OPERATION_REJECTED or OPERATION_CANCELLED.
     * </pre>
     */
    public dev.opledger.v1.ExecuteResponse execute(dev.opledger.v1.ExecuteRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getExecuteMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Get returns an operation and, when asked, its event log. Read-only.
     * Requires any role in the operation's tenant.
     * </pre>
     */
    public dev.opledger.v1.GetResponse get(dev.opledger.v1.GetRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getGetMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Reconcile resolves an operation whose outcome is unknown, or which is
     * EXECUTING with an expired lease, by looking the downstream up by the
     * operation's downstream key: found → the real outcome; a trustworthy
     * not-found → READY again (the next Execute resubmits with the same key);
     * inconclusive → unchanged, and `detail` says why.
     * Requires the `agent` or `operator` role. A `resolution` (manual outcome)
     * requires the `operator` role and is recorded in the event log. On an
     * operation that needs no reconciliation it returns the operation
     * unchanged.
     * </pre>
     */
    public dev.opledger.v1.ReconcileResponse reconcile(dev.opledger.v1.ReconcileRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getReconcileMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Cancel withdraws an operation that has not been executed: from
     * AWAITING_APPROVAL or READY it becomes STATE_CANCELLED, and Execute then
     * refuses it. Once an executor claimed it, it can no longer be cancelled
     * (FAILED_PRECONDITION, CANCEL_NOT_APPLICABLE): the effect may be under
     * way, and undoing it is a new, compensating operation. Repeating a
     * Cancel is `replayed = true`.
     * Requires the `agent` or `operator` role.
     * </pre>
     */
    public dev.opledger.v1.CancelResponse cancel(dev.opledger.v1.CancelRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getCancelMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListTools returns every tool this server is configured with, from the
     * same tools file the ledger enforces, so an agent runtime can build its
     * model's tool list (names, descriptions, argument schemas) without
     * copying them by hand. Read-only.
     * Requires any role in a tenant; every tenant sees the same tools.
     * </pre>
     */
    public dev.opledger.v1.ListToolsResponse listTools(dev.opledger.v1.ListToolsRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getListToolsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListOperations lists the caller's tenant's operations, newest first,
     * optionally only those in some states or of one tool, a page at a time
     * (AIP-158). Read-only; served from an index.
     * `next_page_token` is opaque and bound to the caller's tenant and to the
     * request's filters: a token that was altered, comes from another tenant
     * or is sent with other `states` or `tool` fails with INVALID_ARGUMENT and
     * reason FIELD_INVALID (field `page_token`). `page_size` may change
     * between pages.
     * Requires the `agent`, `approver` or `operator` role.
     * </pre>
     */
    public dev.opledger.v1.ListOperationsResponse listOperations(dev.opledger.v1.ListOperationsRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getListOperationsMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do limited synchronous rpc calls to service LedgerService.
   * <pre>
   * LedgerService is the execution ledger for AI agents' side-effecting tool
   * calls. An agent Prepares an operation, an approver Approves exactly that
   * operation, the agent Executes it, and anyone in the tenant may Get or
   * Reconcile it. One approved operation produces at most one downstream
   * effect, and every repeated call is answered from the ledger.
   * Every call carries `authorization: Bearer &lt;api key&gt;` metadata. The tenant
   * is taken from the key, never from a request field; another tenant's
   * operation is reported as NOT_FOUND. Errors are gRPC statuses carrying
   * exactly one google.rpc.ErrorInfo whose domain is "opledger.v1" and whose
   * reason is an ErrorReason name without its prefix (for example
   * "IDEMPOTENCY_KEY_REUSED").
   * </pre>
   */
  public static final class LedgerServiceBlockingStub
      extends io.grpc.stub.AbstractBlockingStub<LedgerServiceBlockingStub> {
    private LedgerServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LedgerServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LedgerServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Prepare records a proposed tool call as an operation, or returns the one
     * already recorded under the same idempotency key.
     * Requires the `idempotency-key` metadata (1 to 255 printable ASCII
     * characters, exactly one value) and the `agent` role. The key is scoped by
     * (tenant, tool). The tool must exist and the args must match its JSON
     * Schema; a request that fails validation stores nothing and reserves no
     * key.
     * The same key with the same fingerprint returns the existing operation
     * with `replayed = true`. The same key with a different fingerprint (for
     * example a changed amount) fails with ALREADY_EXISTS and reason
     * IDEMPOTENCY_KEY_REUSED and leaves the stored operation unchanged.
     * Concurrent twins never create a second operation.
     * A new operation starts in STATE_AWAITING_APPROVAL when its tool requires
     * approval, otherwise in STATE_READY.
     * With `execute`, Prepare also does what an Execute of the operation would
     * do, in the same call (the one-call path for tools that need no
     * approval): see PrepareRequest.execute.
     * </pre>
     */
    public dev.opledger.v1.PrepareResponse prepare(dev.opledger.v1.PrepareRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getPrepareMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Approve records a person's decision on exactly one operation, bound to
     * the fingerprint the approver was shown.
     * Requires the `approver` role in the operation's tenant. The principal
     * that prepared the operation may not approve it (PERMISSION_DENIED,
     * SELF_APPROVAL_FORBIDDEN). A fingerprint that is not the operation's fails
     * with FAILED_PRECONDITION and APPROVAL_FINGERPRINT_MISMATCH and changes
     * nothing. An approval expires after the tool's TTL; an expired approval
     * may be approved again. Repeating the same decision is idempotent
     * (`replayed = true`); the opposite decision fails with FAILED_PRECONDITION
     * and APPROVAL_CONFLICT. DECISION_DENY moves the operation to
     * STATE_REJECTED.
     * </pre>
     */
    public dev.opledger.v1.ApproveResponse approve(dev.opledger.v1.ApproveRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getApproveMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Execute performs the operation's downstream call at most once and
     * answers from the ledger on every repeat.
     * Requires the `agent` role. By state:
     *   - READY: this call claims the operation (attempts + 1, fence + 1, a
     *     lease), calls the downstream with the operation's stable
     *     downstream key and records the outcome.
     *   - EXECUTING: returns the operation as it is (pending), or waits up to
     *     `wait` for the outcome.
     *   - SUCCEEDED, FAILED: returns the stored outcome with `replayed = true`
     *     and makes no downstream call.
     *   - OUTCOME_UNKNOWN: returns that state; never submits a new request.
     *     Use Reconcile.
     *   - AWAITING_APPROVAL, an expired approval, REJECTED, CANCELLED:
     *     FAILED_PRECONDITION with APPROVAL_REQUIRED, APPROVAL_EXPIRED,
     *     OPERATION_REJECTED or OPERATION_CANCELLED.
     * </pre>
     */
    public dev.opledger.v1.ExecuteResponse execute(dev.opledger.v1.ExecuteRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getExecuteMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Get returns an operation and, when asked, its event log. Read-only.
     * Requires any role in the operation's tenant.
     * </pre>
     */
    public dev.opledger.v1.GetResponse get(dev.opledger.v1.GetRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Reconcile resolves an operation whose outcome is unknown, or which is
     * EXECUTING with an expired lease, by looking the downstream up by the
     * operation's downstream key: found → the real outcome; a trustworthy
     * not-found → READY again (the next Execute resubmits with the same key);
     * inconclusive → unchanged, and `detail` says why.
     * Requires the `agent` or `operator` role. A `resolution` (manual outcome)
     * requires the `operator` role and is recorded in the event log. On an
     * operation that needs no reconciliation it returns the operation
     * unchanged.
     * </pre>
     */
    public dev.opledger.v1.ReconcileResponse reconcile(dev.opledger.v1.ReconcileRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReconcileMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Cancel withdraws an operation that has not been executed: from
     * AWAITING_APPROVAL or READY it becomes STATE_CANCELLED, and Execute then
     * refuses it. Once an executor claimed it, it can no longer be cancelled
     * (FAILED_PRECONDITION, CANCEL_NOT_APPLICABLE): the effect may be under
     * way, and undoing it is a new, compensating operation. Repeating a
     * Cancel is `replayed = true`.
     * Requires the `agent` or `operator` role.
     * </pre>
     */
    public dev.opledger.v1.CancelResponse cancel(dev.opledger.v1.CancelRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCancelMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListTools returns every tool this server is configured with, from the
     * same tools file the ledger enforces, so an agent runtime can build its
     * model's tool list (names, descriptions, argument schemas) without
     * copying them by hand. Read-only.
     * Requires any role in a tenant; every tenant sees the same tools.
     * </pre>
     */
    public dev.opledger.v1.ListToolsResponse listTools(dev.opledger.v1.ListToolsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListToolsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListOperations lists the caller's tenant's operations, newest first,
     * optionally only those in some states or of one tool, a page at a time
     * (AIP-158). Read-only; served from an index.
     * `next_page_token` is opaque and bound to the caller's tenant and to the
     * request's filters: a token that was altered, comes from another tenant
     * or is sent with other `states` or `tool` fails with INVALID_ARGUMENT and
     * reason FIELD_INVALID (field `page_token`). `page_size` may change
     * between pages.
     * Requires the `agent`, `approver` or `operator` role.
     * </pre>
     */
    public dev.opledger.v1.ListOperationsResponse listOperations(dev.opledger.v1.ListOperationsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListOperationsMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do ListenableFuture-style rpc calls to service LedgerService.
   * <pre>
   * LedgerService is the execution ledger for AI agents' side-effecting tool
   * calls. An agent Prepares an operation, an approver Approves exactly that
   * operation, the agent Executes it, and anyone in the tenant may Get or
   * Reconcile it. One approved operation produces at most one downstream
   * effect, and every repeated call is answered from the ledger.
   * Every call carries `authorization: Bearer &lt;api key&gt;` metadata. The tenant
   * is taken from the key, never from a request field; another tenant's
   * operation is reported as NOT_FOUND. Errors are gRPC statuses carrying
   * exactly one google.rpc.ErrorInfo whose domain is "opledger.v1" and whose
   * reason is an ErrorReason name without its prefix (for example
   * "IDEMPOTENCY_KEY_REUSED").
   * </pre>
   */
  public static final class LedgerServiceFutureStub
      extends io.grpc.stub.AbstractFutureStub<LedgerServiceFutureStub> {
    private LedgerServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LedgerServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LedgerServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Prepare records a proposed tool call as an operation, or returns the one
     * already recorded under the same idempotency key.
     * Requires the `idempotency-key` metadata (1 to 255 printable ASCII
     * characters, exactly one value) and the `agent` role. The key is scoped by
     * (tenant, tool). The tool must exist and the args must match its JSON
     * Schema; a request that fails validation stores nothing and reserves no
     * key.
     * The same key with the same fingerprint returns the existing operation
     * with `replayed = true`. The same key with a different fingerprint (for
     * example a changed amount) fails with ALREADY_EXISTS and reason
     * IDEMPOTENCY_KEY_REUSED and leaves the stored operation unchanged.
     * Concurrent twins never create a second operation.
     * A new operation starts in STATE_AWAITING_APPROVAL when its tool requires
     * approval, otherwise in STATE_READY.
     * With `execute`, Prepare also does what an Execute of the operation would
     * do, in the same call (the one-call path for tools that need no
     * approval): see PrepareRequest.execute.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.opledger.v1.PrepareResponse> prepare(
        dev.opledger.v1.PrepareRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getPrepareMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Approve records a person's decision on exactly one operation, bound to
     * the fingerprint the approver was shown.
     * Requires the `approver` role in the operation's tenant. The principal
     * that prepared the operation may not approve it (PERMISSION_DENIED,
     * SELF_APPROVAL_FORBIDDEN). A fingerprint that is not the operation's fails
     * with FAILED_PRECONDITION and APPROVAL_FINGERPRINT_MISMATCH and changes
     * nothing. An approval expires after the tool's TTL; an expired approval
     * may be approved again. Repeating the same decision is idempotent
     * (`replayed = true`); the opposite decision fails with FAILED_PRECONDITION
     * and APPROVAL_CONFLICT. DECISION_DENY moves the operation to
     * STATE_REJECTED.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.opledger.v1.ApproveResponse> approve(
        dev.opledger.v1.ApproveRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getApproveMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Execute performs the operation's downstream call at most once and
     * answers from the ledger on every repeat.
     * Requires the `agent` role. By state:
     *   - READY: this call claims the operation (attempts + 1, fence + 1, a
     *     lease), calls the downstream with the operation's stable
     *     downstream key and records the outcome.
     *   - EXECUTING: returns the operation as it is (pending), or waits up to
     *     `wait` for the outcome.
     *   - SUCCEEDED, FAILED: returns the stored outcome with `replayed = true`
     *     and makes no downstream call.
     *   - OUTCOME_UNKNOWN: returns that state; never submits a new request.
     *     Use Reconcile.
     *   - AWAITING_APPROVAL, an expired approval, REJECTED, CANCELLED:
     *     FAILED_PRECONDITION with APPROVAL_REQUIRED, APPROVAL_EXPIRED,
     *     OPERATION_REJECTED or OPERATION_CANCELLED.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.opledger.v1.ExecuteResponse> execute(
        dev.opledger.v1.ExecuteRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getExecuteMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Get returns an operation and, when asked, its event log. Read-only.
     * Requires any role in the operation's tenant.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.opledger.v1.GetResponse> get(
        dev.opledger.v1.GetRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Reconcile resolves an operation whose outcome is unknown, or which is
     * EXECUTING with an expired lease, by looking the downstream up by the
     * operation's downstream key: found → the real outcome; a trustworthy
     * not-found → READY again (the next Execute resubmits with the same key);
     * inconclusive → unchanged, and `detail` says why.
     * Requires the `agent` or `operator` role. A `resolution` (manual outcome)
     * requires the `operator` role and is recorded in the event log. On an
     * operation that needs no reconciliation it returns the operation
     * unchanged.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.opledger.v1.ReconcileResponse> reconcile(
        dev.opledger.v1.ReconcileRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReconcileMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Cancel withdraws an operation that has not been executed: from
     * AWAITING_APPROVAL or READY it becomes STATE_CANCELLED, and Execute then
     * refuses it. Once an executor claimed it, it can no longer be cancelled
     * (FAILED_PRECONDITION, CANCEL_NOT_APPLICABLE): the effect may be under
     * way, and undoing it is a new, compensating operation. Repeating a
     * Cancel is `replayed = true`.
     * Requires the `agent` or `operator` role.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.opledger.v1.CancelResponse> cancel(
        dev.opledger.v1.CancelRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCancelMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ListTools returns every tool this server is configured with, from the
     * same tools file the ledger enforces, so an agent runtime can build its
     * model's tool list (names, descriptions, argument schemas) without
     * copying them by hand. Read-only.
     * Requires any role in a tenant; every tenant sees the same tools.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.opledger.v1.ListToolsResponse> listTools(
        dev.opledger.v1.ListToolsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListToolsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ListOperations lists the caller's tenant's operations, newest first,
     * optionally only those in some states or of one tool, a page at a time
     * (AIP-158). Read-only; served from an index.
     * `next_page_token` is opaque and bound to the caller's tenant and to the
     * request's filters: a token that was altered, comes from another tenant
     * or is sent with other `states` or `tool` fails with INVALID_ARGUMENT and
     * reason FIELD_INVALID (field `page_token`). `page_size` may change
     * between pages.
     * Requires the `agent`, `approver` or `operator` role.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.opledger.v1.ListOperationsResponse> listOperations(
        dev.opledger.v1.ListOperationsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListOperationsMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_PREPARE = 0;
  private static final int METHODID_APPROVE = 1;
  private static final int METHODID_EXECUTE = 2;
  private static final int METHODID_GET = 3;
  private static final int METHODID_RECONCILE = 4;
  private static final int METHODID_CANCEL = 5;
  private static final int METHODID_LIST_TOOLS = 6;
  private static final int METHODID_LIST_OPERATIONS = 7;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final AsyncService serviceImpl;
    private final int methodId;

    MethodHandlers(AsyncService serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_PREPARE:
          serviceImpl.prepare((dev.opledger.v1.PrepareRequest) request,
              (io.grpc.stub.StreamObserver<dev.opledger.v1.PrepareResponse>) responseObserver);
          break;
        case METHODID_APPROVE:
          serviceImpl.approve((dev.opledger.v1.ApproveRequest) request,
              (io.grpc.stub.StreamObserver<dev.opledger.v1.ApproveResponse>) responseObserver);
          break;
        case METHODID_EXECUTE:
          serviceImpl.execute((dev.opledger.v1.ExecuteRequest) request,
              (io.grpc.stub.StreamObserver<dev.opledger.v1.ExecuteResponse>) responseObserver);
          break;
        case METHODID_GET:
          serviceImpl.get((dev.opledger.v1.GetRequest) request,
              (io.grpc.stub.StreamObserver<dev.opledger.v1.GetResponse>) responseObserver);
          break;
        case METHODID_RECONCILE:
          serviceImpl.reconcile((dev.opledger.v1.ReconcileRequest) request,
              (io.grpc.stub.StreamObserver<dev.opledger.v1.ReconcileResponse>) responseObserver);
          break;
        case METHODID_CANCEL:
          serviceImpl.cancel((dev.opledger.v1.CancelRequest) request,
              (io.grpc.stub.StreamObserver<dev.opledger.v1.CancelResponse>) responseObserver);
          break;
        case METHODID_LIST_TOOLS:
          serviceImpl.listTools((dev.opledger.v1.ListToolsRequest) request,
              (io.grpc.stub.StreamObserver<dev.opledger.v1.ListToolsResponse>) responseObserver);
          break;
        case METHODID_LIST_OPERATIONS:
          serviceImpl.listOperations((dev.opledger.v1.ListOperationsRequest) request,
              (io.grpc.stub.StreamObserver<dev.opledger.v1.ListOperationsResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        default:
          throw new AssertionError();
      }
    }
  }

  public static final io.grpc.ServerServiceDefinition bindService(AsyncService service) {
    return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
        .addMethod(
          getPrepareMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.opledger.v1.PrepareRequest,
              dev.opledger.v1.PrepareResponse>(
                service, METHODID_PREPARE)))
        .addMethod(
          getApproveMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.opledger.v1.ApproveRequest,
              dev.opledger.v1.ApproveResponse>(
                service, METHODID_APPROVE)))
        .addMethod(
          getExecuteMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.opledger.v1.ExecuteRequest,
              dev.opledger.v1.ExecuteResponse>(
                service, METHODID_EXECUTE)))
        .addMethod(
          getGetMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.opledger.v1.GetRequest,
              dev.opledger.v1.GetResponse>(
                service, METHODID_GET)))
        .addMethod(
          getReconcileMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.opledger.v1.ReconcileRequest,
              dev.opledger.v1.ReconcileResponse>(
                service, METHODID_RECONCILE)))
        .addMethod(
          getCancelMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.opledger.v1.CancelRequest,
              dev.opledger.v1.CancelResponse>(
                service, METHODID_CANCEL)))
        .addMethod(
          getListToolsMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.opledger.v1.ListToolsRequest,
              dev.opledger.v1.ListToolsResponse>(
                service, METHODID_LIST_TOOLS)))
        .addMethod(
          getListOperationsMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.opledger.v1.ListOperationsRequest,
              dev.opledger.v1.ListOperationsResponse>(
                service, METHODID_LIST_OPERATIONS)))
        .build();
  }

  private static abstract class LedgerServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    LedgerServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.opledger.v1.LedgerProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("LedgerService");
    }
  }

  private static final class LedgerServiceFileDescriptorSupplier
      extends LedgerServiceBaseDescriptorSupplier {
    LedgerServiceFileDescriptorSupplier() {}
  }

  private static final class LedgerServiceMethodDescriptorSupplier
      extends LedgerServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final java.lang.String methodName;

    LedgerServiceMethodDescriptorSupplier(java.lang.String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (LedgerServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new LedgerServiceFileDescriptorSupplier())
              .addMethod(getPrepareMethod())
              .addMethod(getApproveMethod())
              .addMethod(getExecuteMethod())
              .addMethod(getGetMethod())
              .addMethod(getReconcileMethod())
              .addMethod(getCancelMethod())
              .addMethod(getListToolsMethod())
              .addMethod(getListOperationsMethod())
              .build();
        }
      }
    }
    return result;
  }
}
