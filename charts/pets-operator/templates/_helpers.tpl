{{/* Name of the release's objects: the release name when it already contains the chart name. */}}
{{- define "pets-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pets-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pets-operator.labels" -}}
{{ include "pets-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: pets-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pets-operator.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "pets-operator.fullname" .) -}}
{{- end -}}

{{- define "pets-operator.peeringName" -}}
{{- .Values.peering.name | default (include "pets-operator.fullname" .) -}}
{{- end -}}

{{/* "cluster" or "namespaced": where the operator's permissions (and peering object) live. */}}
{{- define "pets-operator.rbacScope" -}}
{{- $scope := .Values.rbac.scope | default (ternary "namespaced" "cluster" (gt (len .Values.watchNamespaces) 0)) -}}
{{- if and (eq $scope "namespaced") (not .Values.watchNamespaces) -}}
{{- fail "rbac.scope=namespaced needs watchNamespaces: the namespaces the operator serves" -}}
{{- end -}}
{{- $scope -}}
{{- end -}}

{{/* Permissions in each namespace it serves: the calls in pets_operator/kube.py and kopf's own, and no more
     (tests/deploy/test_chart.py derives them from the code and checks these rules equal them). */}}
{{- define "pets-operator.namespacedRules" -}}
# The resource it serves: kopf watches it and patches its finalizer and annotations; the
# operator deletes finished jobs after spec.ttlSecondsAfterFinished.
- apiGroups: [training.pets.dev]
  resources: [petstrainingjobs]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [training.pets.dev]
  resources: [petstrainingjobs/status]
  verbs: [patch]
# What each job owns: one pod per node (watched through a kopf index) and one headless
# Service, which the garbage collector removes with the job; pod 0's log carries the metrics.
# `get` on each kind it creates: an object already there under its name is adopted only when it is
# the job's own (its ownerReference), anything else is a name conflict.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [services]
  verbs: [get, create]
{{- if .Values.networkPolicy.enabled }}
# And one NetworkPolicy (its pods admit ingress only from each other), removed with the job as well.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create]
{{- end }}
{{- if .Values.gangScheduling.enabled }}
# Jobs with spec.gangScheduling: the gang scheduler's PodGroup, created with the job (once; an existing
# one is left as it is) and removed with it by the garbage collector.
{{- if has "coscheduling" .Values.gangScheduling.schedulers }}
- apiGroups: [scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [get, create]
{{- end }}
{{- if has "volcano" .Values.gangScheduling.schedulers }}
- apiGroups: [scheduling.volcano.sh]
  resources: [podgroups]
  verbs: [get, create]
{{- end }}
{{- end }}
# kopf posts its handler progress and errors as core events; the operator lists the kubelet's
# FailedMount Warning events of a job's pods (a volume that cannot be mounted is said nowhere else).
- apiGroups: [""]
  resources: [events]
  verbs: [list, create]
{{- end -}}

{{/* "true" when the pods elect a leader on a Lease (peering, when enabled, picks the active pod instead). */}}
{{- define "pets-operator.leaderElection" -}}
{{- if and .Values.leaderElection.enabled (not .Values.peering.enabled) -}}true{{- end -}}
{{- end -}}

{{- define "pets-operator.leaseName" -}}
{{- .Values.leaderElection.leaseName | default (printf "%s-leader" (include "pets-operator.fullname" . | trunc 56 | trimSuffix "-")) -}}
{{- end -}}

{{/* What the values may not combine: checked where the Deployment renders, with the fix in the message. */}}
{{- define "pets-operator.checkReplicas" -}}
{{- $elect := .Values.leaderElection -}}
{{- if and (gt (int .Values.replicas) 1) (not (include "pets-operator.leaderElection" .)) (not .Values.peering.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled=true (or peering.enabled=true): otherwise every pod acts on every job" -}}
{{- end -}}
{{- if and (include "pets-operator.leaderElection" .) (not (and (gt (int $elect.leaseDurationSeconds) (int $elect.renewDeadlineSeconds)) (gt (mulf (int $elect.renewDeadlineSeconds) 10) (mulf (int $elect.retryPeriodSeconds) 12)))) -}}
{{- fail (printf "leaderElection needs leaseDurationSeconds > renewDeadlineSeconds > 1.2 x retryPeriodSeconds, got %v > %v > 1.2 x %v" $elect.leaseDurationSeconds $elect.renewDeadlineSeconds $elect.retryPeriodSeconds) -}}
{{- end -}}
{{- end -}}

{{/* The admission policy, its binding and its parameter ConfigMap. */}}
{{- define "pets-operator.policyName" -}}
{{- printf "%s-policy" (include "pets-operator.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}

{{/* policy.allowedImages with trainerImage first: the image jobs without spec.image get is always allowed. */}}
{{- define "pets-operator.allowedImages" -}}
{{- prepend .Values.policy.allowedImages .Values.trainerImage | uniq | join "," -}}
{{- end -}}
