import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import com.alibaba.fastjson.JSON;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.NamespaceUtil;

/**
 * The Java side of the namespace tests (tests/client/test_namespace_java.py), with the shipped RocketMQ 4.9.8
 * client and ClientConfig.setNamespace. Every stdout line is one JSON object.
 *
 *   rules
 *       reads "namespace TAB resource" lines from stdin and prints for each
 *       {"wrap": NamespaceUtil.wrapNamespace(ns, r), "unwrap": NamespaceUtil.withoutNamespace(r, ns)}.
 *
 *   produce NAMESRV TOPIC NAMESPACE [--count N]
 *       DefaultMQProducer (namespace set) sends N messages "java ns body i" with key "NK-i"; one line per
 *       send {"sent": i, "msgId", "topic" (SendResult's queue topic), "queueId", "queueOffset"}, then
 *       {"result": "DONE", "sent": n, "errors": e}.
 *
 *   consume NAMESRV TOPIC GROUP NAMESPACE [--count N] [--timeout-s 60] [--retry-first 0|1]
 *       DefaultMQPushConsumer (namespace set, CLUSTERING, from the first offset); with --retry-first 1 a
 *       message seen for the first time is answered RECONSUME_LATER with delay level 1 (1 s), so it comes
 *       back through %RETRY%NAMESPACE%GROUP. One line per delivery {"msg", "t", "topic", "queueId",
 *       "queueOffset", "msgId", "keys", "body", "reconsumeTimes", "retryTopic" (the RETRY_TOPIC property)};
 *       stops after N successful deliveries or the timeout; last line {"result": "DONE", "ok": n}.
 */
public final class NamespaceInterop {
    private static final Object OUT = new Object();

    public static void main(String[] args) throws Exception {
        if (System.getProperty("rocketmq.client.rebalance.waitInterval") == null) {
            // as ClientInterop: the retry topic is created by the first heartbeat, after the start's route
            // lookup, so its queues are assigned at the next rebalance (20 s by default)
            System.setProperty("rocketmq.client.rebalance.waitInterval", "2000");
        }
        if (args.length < 1) {
            System.err.println("usage: NamespaceInterop rules | produce NS TOPIC NAMESPACE | consume NS TOPIC GROUP NAMESPACE");
            System.exit(2);
        }
        int fixed = "consume".equals(args[0]) ? 5 : "produce".equals(args[0]) ? 4 : 1;
        Map<String, String> opt = new TreeMap<>();
        for (int i = fixed; i + 1 < args.length; i += 2) {
            opt.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        int rc;
        switch (args[0]) {
            case "rules": rc = rules(); break;
            case "produce": rc = produce(args[1], args[2], args[3], opt); break;
            case "consume": rc = consume(args[1], args[2], args[3], args[4], opt); break;
            default:
                System.err.println("unknown mode " + args[0]);
                rc = 2;
        }
        System.exit(rc);
    }

    private static long longOpt(Map<String, String> opt, String k, long d) {
        String v = opt.get(k);
        return v == null ? d : Long.parseLong(v);
    }

    static int rules() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            int tab = line.indexOf('\t');
            String ns = line.substring(0, tab);
            String resource = line.substring(tab + 1);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("wrap", NamespaceUtil.wrapNamespace(ns, resource));
            out.put("unwrap", NamespaceUtil.withoutNamespace(resource, ns));
            emit(out);
        }
        return 0;
    }

    static int produce(String namesrv, String topic, String namespace, Map<String, String> opt) throws Exception {
        long count = longOpt(opt, "count", 10);
        DefaultMQProducer p = new DefaultMQProducer("NamespaceInteropProducer");
        p.setNamesrvAddr(namesrv);
        p.setNamespace(namespace);
        p.setInstanceName("ns-produce-" + ProcessHandle.current().pid());
        p.setSendMsgTimeout(10000);
        p.start();
        long errors = 0;
        for (long i = 0; i < count; i++) {
            Message m = new Message(topic, "TagA", "NK-" + i,
                    ("java ns body " + i).getBytes(StandardCharsets.UTF_8));
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("sent", i);
            try {
                SendResult r = p.send(m);
                line.put("status", r.getSendStatus().toString());
                line.put("msgId", r.getMsgId());
                line.put("topic", r.getMessageQueue().getTopic());
                line.put("queueId", r.getMessageQueue().getQueueId());
                line.put("queueOffset", r.getQueueOffset());
            } catch (Exception e) {
                errors++;
                line.put("status", "ERROR");
                line.put("error", e.toString());
            }
            emit(line);
        }
        p.shutdown();
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("result", "DONE");
        r.put("sent", count);
        r.put("errors", errors);
        emit(r);
        return errors == 0 ? 0 : 1;
    }

    static int consume(String namesrv, String topic, String group, String namespace, Map<String, String> opt)
            throws Exception {
        long count = longOpt(opt, "count", 0);
        long timeoutMs = 1000 * longOpt(opt, "timeout-s", 60);
        boolean retryFirst = "1".equals(opt.get("retry-first"));
        Set<String> seen = ConcurrentHashMap.newKeySet();
        AtomicLong deliveries = new AtomicLong();
        AtomicLong ok = new AtomicLong();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.setNamespace(namespace);
        c.setInstanceName("ns-consume-" + ProcessHandle.current().pid());
        c.setPollNameServerInterval(1000);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            boolean later = false;
            for (MessageExt m : msgs) {
                Map<String, Object> line = new LinkedHashMap<>();
                line.put("msg", deliveries.incrementAndGet());
                line.put("t", System.currentTimeMillis());
                line.put("topic", m.getTopic());
                line.put("queueId", m.getQueueId());
                line.put("queueOffset", m.getQueueOffset());
                line.put("msgId", m.getMsgId());
                line.put("keys", m.getKeys());
                line.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
                line.put("reconsumeTimes", m.getReconsumeTimes());
                line.put("retryTopic", m.getProperty("RETRY_TOPIC"));
                emit(line);
                if (retryFirst && seen.add(m.getMsgId())) {
                    later = true;
                }
            }
            if (later) {
                ctx.setDelayLevelWhenNextConsume(1);
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
            ok.addAndGet(msgs.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Map<String, Object> started = new LinkedHashMap<>();
        started.put("event", "started");
        started.put("group", c.getConsumerGroup());
        started.put("t", System.currentTimeMillis());
        emit(started);
        long t0 = System.currentTimeMillis();
        while (System.currentTimeMillis() - t0 < timeoutMs && (count == 0 || ok.get() < count)) {
            Thread.sleep(50);
        }
        c.shutdown();
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("result", "DONE");
        r.put("ok", ok.get());
        emit(r);
        return 0;
    }

    static void emit(Map<String, Object> m) {
        String s = JSON.toJSONString(m);
        synchronized (OUT) {
            System.out.println(s);
            System.out.flush();
        }
    }
}
