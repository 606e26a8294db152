{{/* A worker role's Deployment and headless Service: (dict "root" $ "role" "prefill"|"decode").
With engine.kind vllm the pod holds the tandem worker and the vLLM server it drives
over loopback, with its KV events on loopback too. */}}
{{- define "tandem.worker" -}}
{{- $root := .root -}}
{{- $role := .role -}}
{{- $v := index $root.Values $role -}}
{{- $e := $root.Values.engine -}}
{{- $vl := $e.vllm -}}
{{- $gpu := eq $e.kind "vllm" -}}
{{- $ctx := dict "root" $root "role" $role -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "tandem.roleName" $ctx }}
  labels:
    {{- include "tandem.labels" $ctx | nindent 4 }}
spec:
  replicas: {{ $v.replicas }}
  {{- with $v.strategy }}
  strategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "tandem.selectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "tandem.labels" $ctx | nindent 8 }}
      {{- with $v.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      {{- include "tandem.podSpec" $ctx | nindent 6 }}
      {{- if and $gpu $vl.tokenizer.fromHub }}
      initContainers:
        # The model's tokenizer.json (and chat template) for the frontend, which
        # tokenizes with what the worker's model card publishes.
        - name: tokenizer
          image: {{ $vl.image }}
          imagePullPolicy: {{ $vl.pullPolicy }}
          command: [python3, -c]
          args:
            - |
              import json, os, sys
              from huggingface_hub import hf_hub_download
              model, out = os.environ["MODEL"], "/tokenizer"
              hf_hub_download(model, "tokenizer.json", local_dir=out)
              if os.environ["CHAT_TEMPLATE"] == "true":
                  template = None
                  try:
                      template = open(hf_hub_download(model, "chat_template.jinja", local_dir=out + "/.src")).read()
                  except Exception:
                      cfg = json.load(open(hf_hub_download(model, "tokenizer_config.json", local_dir=out + "/.src")))
                      template = cfg.get("chat_template")
                      if isinstance(template, list):
                          template = next((t["template"] for t in template if t.get("name") == "default"), None)
                  if not template:
                      sys.exit(model + " has no chat template: set engine.vllm.tokenizer.chatTemplate to false")
                  open(out + "/chat_template.jinja", "w").write(template)
          env:
            - name: MODEL
              value: {{ $vl.model | quote }}
            - name: CHAT_TEMPLATE
              value: {{ $vl.tokenizer.chatTemplate | quote }}
            - name: HOME
              value: /cache
            - name: HF_HOME
              value: /cache/huggingface
            {{- if $vl.hfTokenSecret }}
            - name: HF_TOKEN
              valueFrom:
                secretKeyRef:
                  name: {{ $vl.hfTokenSecret }}
                  key: HF_TOKEN
            {{- end }}
          securityContext:
            {{- toYaml $vl.securityContext | nindent 12 }}
          volumeMounts:
            - name: tokenizer
              mountPath: /tokenizer
            - name: engine-cache
              mountPath: /cache
      {{- end }}
      containers:
        - name: tandem
          image: {{ include "tandem.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - {{ $role }}
            {{- include "tandem.serviceArgs" (dict "root" $root "role" $role "port" $v.port) | nindent 12 }}
            - --id=$(POD_NAME)
            - --block-size={{ $e.blockSize }}
            {{- if eq $role "prefill" }}
            - --kv-listen=0.0.0.0:{{ $v.kvPort }}
            {{- else }}
            - --mode=decode
            - --policy={{ $v.policy }}
            - --short-prefill-threshold={{ $v.shortPrefillThreshold }}
            {{- end }}
            - --engine={{ $e.kind }}
            {{- if eq $e.kind "native" }}
            - --model={{ $e.model }}
            {{- else if eq $e.kind "sim" }}
            - --sim-profile={{ $e.sim.profile }}
            - --sim-link={{ $e.sim.link }}
            - --sim-time-scale={{ $e.sim.timeScale }}
            {{- else }}
            - --engine-url=http://127.0.0.1:{{ $vl.port }}
            - --model={{ $vl.model }}
            - --tokenizer=/tokenizer/tokenizer.json
            {{- if $vl.tokenizer.chatTemplate }}
            - --chat-template=/tokenizer/chat_template.jinja
            {{- end }}
            - --kv-events-endpoint=tcp://127.0.0.1:{{ $vl.kvEventsPort }}
            - --kv-events-replay-endpoint=tcp://127.0.0.1:{{ $vl.kvEventsReplayPort }}
            - --kv-events-topic={{ $vl.kvEventsTopic }}
            {{- end }}
            {{- with $e.servedModelName }}
            - --served-model-name={{ . }}
            {{- end }}
            {{- with $v.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            {{- include "tandem.env" $root | nindent 12 }}
          ports:
            - name: grpc
              containerPort: {{ $v.port }}
              protocol: TCP
            {{- if eq $role "prefill" }}
            - name: kv
              containerPort: {{ $v.kvPort }}
              protocol: TCP
            {{- end }}
          # /readyz: 200 while the worker serves (the same as its gRPC health), 503
          # with the reason while it starts, waits for its prefill workers or its
          # engine server, or drains.
          livenessProbe:
            tcpSocket:
              port: grpc
            periodSeconds: 10
            timeoutSeconds: 3
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: grpc
            periodSeconds: 2
            timeoutSeconds: 2
            failureThreshold: 2
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "tandem.volumeMounts" $root | nindent 12 }}
            {{- if and (eq $e.kind "native") $e.modelVolume }}
            - name: models
              mountPath: /models
              readOnly: true
            {{- end }}
            {{- if $gpu }}
            - name: tokenizer
              mountPath: /tokenizer
              readOnly: true
            {{- end }}
        {{- if $gpu }}
        - name: engine
          image: {{ $vl.image }}
          imagePullPolicy: {{ $vl.pullPolicy }}
          args:
            - --model
            - {{ $vl.model | quote }}
            - --port
            - {{ $vl.port | quote }}
            - --block-size
            - {{ $e.blockSize | quote }}
            - --enable-prefix-caching
            - --kv-transfer-config
            - '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"recompute"}'
            - --kv-events-config
            - '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:{{ $vl.kvEventsPort }}","replay_endpoint":"tcp://*:{{ $vl.kvEventsReplayPort }}","topic":"{{ $vl.kvEventsTopic }}"}'
            {{- with $vl.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            # The address the other vLLM servers reach this one's NIXL side channel at.
            - name: VLLM_NIXL_SIDE_CHANNEL_HOST
              value: $(POD_IP)
            - name: VLLM_NIXL_SIDE_CHANNEL_PORT
              value: {{ $vl.nixlSideChannelPort | quote }}
            # Prefix hashes alike on every server (tandem keys blocks by token ids anyway).
            - name: PYTHONHASHSEED
              value: "0"
            - name: HOME
              value: /cache
            - name: HF_HOME
              value: /cache/huggingface
            {{- if $vl.hfTokenSecret }}
            - name: HF_TOKEN
              valueFrom:
                secretKeyRef:
                  name: {{ $vl.hfTokenSecret }}
                  key: HF_TOKEN
            {{- end }}
            {{- with $vl.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: engine
              containerPort: {{ $vl.port }}
              protocol: TCP
            - name: nixl
              containerPort: {{ $vl.nixlSideChannelPort }}
              protocol: TCP
          startupProbe:
            httpGet:
              path: /health
              port: engine
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: {{ $vl.startupFailureThreshold }}
          livenessProbe:
            httpGet:
              path: /health
              port: engine
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 6
          resources:
            {{- $res := deepCopy $vl.resources }}
            {{- $_ := set $res "requests" (merge (dict "nvidia.com/gpu" $vl.gpus) (default (dict) $res.requests)) }}
            {{- $_ := set $res "limits" (merge (dict "nvidia.com/gpu" $vl.gpus) (default (dict) $res.limits)) }}
            {{- toYaml $res | nindent 12 }}
          securityContext:
            {{- toYaml $vl.securityContext | nindent 12 }}
          volumeMounts:
            - name: engine-cache
              mountPath: /cache
            - name: shm
              mountPath: /dev/shm
        {{- end }}
      volumes:
        {{- include "tandem.volumes" $ctx | nindent 8 }}
        {{- if and (eq $e.kind "native") $e.modelVolume }}
        - name: models
          {{- toYaml $e.modelVolume | nindent 10 }}
        {{- end }}
        {{- if $gpu }}
        - name: tokenizer
          {{- if $vl.tokenizer.fromHub }}
          emptyDir: {}
          {{- else }}
          {{- toYaml $vl.tokenizer.volume | nindent 10 }}
          {{- end }}
        - name: engine-cache
          {{- toYaml $vl.cacheVolume | nindent 10 }}
        - name: shm
          emptyDir:
            medium: Memory
            sizeLimit: {{ $vl.shmSize }}
        {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ include "tandem.roleName" $ctx }}
  labels:
    {{- include "tandem.labels" $ctx | nindent 4 }}
spec:
  # Headless: routers and decode workers find each worker through Consul; this
  # Service is for Prometheus and for tandem drain, health and workers by hand.
  clusterIP: None
  selector:
    {{- include "tandem.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: grpc
      port: {{ $v.port }}
      targetPort: grpc
      protocol: TCP
      appProtocol: kubernetes.io/h2c
    {{- if eq $role "prefill" }}
    - name: kv
      port: {{ $v.kvPort }}
      targetPort: kv
      protocol: TCP
      appProtocol: kubernetes.io/h2c
    {{- end }}
    {{- if $gpu }}
    - name: engine
      port: {{ $vl.port }}
      targetPort: engine
      protocol: TCP
    {{- end }}
{{- end -}}
