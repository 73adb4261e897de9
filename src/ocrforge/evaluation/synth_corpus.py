"""Text for `ocrforge synth`: short sentences and vocabulary written for this project.

Everything here is original text (no quotations); characters outside the recognition
dictionary are filtered out at generation time, so the corpus can grow freely.
"""

from __future__ import annotations

ZH_SENTENCES = """
今天的天气很好，我们一起去公园散步。
这份报告总结了过去一年的主要工作和成果。
请在下周五之前提交所有的申请材料。
会议将在上午九点准时开始，请大家提前到场。
新的系统上线以后，处理速度提高了很多。
我们需要更多的数据来验证这个想法。
城市的交通问题越来越受到人们的关注。
这本书介绍了计算机科学的基本概念。
学生们在图书馆里安静地看书学习。
公司计划明年在南方开设三家新的门店。
如果你有任何问题，可以随时联系我们。
产品的质量是企业发展的基础。
他每天早上六点起床，然后去跑步。
这个地区的经济在过去十年里发展很快。
文字识别技术可以把图片中的文字转换成文本。
本次活动共有两百多名志愿者参加。
请保持室内整洁，离开时关好门窗。
研究表明，适量运动有助于身体健康。
我们的目标是为用户提供更好的服务。
春天来了，山上的花都开了。
这家餐厅的菜味道不错，价格也合理。
项目组正在讨论下一阶段的工作安排。
网络连接不稳定，请稍后再试。
图书馆的开放时间是每天早上八点到晚上十点。
该方法在多个公开数据集上取得了较好的结果。
孩子们在操场上快乐地玩耍。
本文提出了一种简单而有效的检测方法。
银行将于节假日期间调整营业时间。
为了节约用水，请随手关闭水龙头。
他在这家公司已经工作了五年。
市场需求的变化推动了技术的进步。
这座桥连接了河的两岸，方便了居民出行。
请仔细阅读使用说明后再操作设备。
实验结果显示，新模型的准确率明显提高。
我们将在下个月举办一次技术交流会。
火车站离这里大约有两公里。
读书可以开阔视野，丰富知识。
工作人员会在二十四小时内处理您的请求。
农民们正在田里收割成熟的稻子。
这台电脑的内存不够，运行速度很慢。
今年的销售额比去年增长了百分之十五。
欢迎各位朋友来到我们的城市参观。
老师耐心地回答了每一个学生的问题。
为了安全起见，请不要在车内吸烟。
数据显示，线上购物的人数持续增加。
这个问题需要从多个角度进行分析。
我们应当尊重每一个人的选择。
晚饭以后，全家人一起看电视。
环境保护是每个人的责任。
该软件支持中文和英文两种语言。
请将文件保存到指定的目录中。
明天上午有小雨，出门记得带伞。
经过大家的努力，任务终于按时完成了。
医生建议他多喝水，注意休息。
这条街上有很多小商店和饭馆。
系统会自动备份重要的数据。
他们正在准备下周的年度总结会议。
合同的有效期为三年，期满后可以续签。
这幅画的颜色非常鲜明。
我们收到了许多来自用户的反馈意见。
"""

ZH_WORDS = """
中国 北京 上海 广州 深圳 杭州 南京 成都 武汉 西安 天津 重庆
时间 地点 名称 数量 单价 金额 合计 备注 日期 编号 类型 状态
学生 老师 医生 工人 经理 客户 用户 作者 读者 朋友 同事 家人
公司 学校 医院 银行 商店 工厂 机场 车站 酒店 餐厅 超市 公园
数据 信息 系统 网络 软件 文件 图片 文字 模型 方法 结果 问题
发展 研究 管理 服务 技术 市场 经济 文化 教育 历史 科学 社会
"""

ZH_ITEMS = """
咖啡 牛奶 面包 鸡蛋 苹果 香蕉 米饭 面条 饺子 包子 豆浆 绿茶 红茶 果汁 矿泉水
鸡肉 牛肉 猪肉 青菜 土豆 西红柿 白菜 蛋糕 饼干 巧克力 酸奶 啤酒 可乐 雪糕
纸巾 牙膏 洗发水 毛巾 电池 雨伞 笔记本 铅笔 文件夹 充电器
"""

ZH_FORM_FIELDS = """
姓名 性别 年龄 出生日期 身份证号 联系电话 电子邮箱 家庭住址 工作单位 职务
申请日期 申请事项 审核意见 负责人 签名 备注 邮政编码 所在城市 紧急联系人 学历
"""

ZH_UI = """
首页 设置 登录 注册 退出 取消 确定 保存 删除 编辑 搜索 返回 下一步 上一步
消息 通知 帮助 关于 个人中心 我的订单 购物车 收藏 分享 刷新 上传 下载
账号 密码 忘记密码 记住我 用户名 全部 最近 更多 发送 添加 管理 统计
"""

ZH_NAMES = "王明 李华 张伟 刘洋 陈静 杨帆 赵磊 黄丽 周杰 吴敏 徐强 孙悦 马超 朱琳 胡斌 郭婷"

ZH_PLACES = """
人民路 中山路 解放路 建设路 和平街 长江路 光明路 新华街 文化路 东风路 青年路 胜利街
"""

EN_SENTENCES = """
The quarterly report summarises the main results of the project.
Please submit the signed form before the end of the month.
Our office is open from Monday to Friday, nine to five.
The new system processes documents much faster than the old one.
All orders above fifty dollars ship free of charge.
Keep this receipt as proof of purchase for your records.
The meeting has been moved to the second floor conference room.
Text recognition turns printed pages into editable text.
We measured the speed and the accuracy on the same machine.
Small fonts and low contrast make a page harder to read.
The library will be closed on public holidays.
Thank you for shopping with us, please come again.
This guide explains how to install and configure the software.
Results may vary depending on the hardware and the settings.
The committee approved the budget for the next fiscal year.
Customers can return unused items within thirty days.
Each table lists the name, the quantity and the unit price.
The train departs at a quarter past eight every morning.
A short summary appears at the top of every chapter.
Please check the address and the phone number carefully.
The weather will be sunny with light wind in the afternoon.
We thank all volunteers who helped at the event.
The software supports both Chinese and English text.
Batch processing reduces the cost of every single page.
Contact our support team if the problem persists.
The model was trained on a large collection of images.
Visitors must register at the front desk on arrival.
The factory produced twelve thousand units last month.
Read the instructions before operating the machine.
The price includes tax and a one year warranty.
Students should bring a pencil and a calculator to the exam.
Sales grew by fifteen percent compared with last year.
This page was left blank on purpose.
Store the files in the shared folder before Friday.
The network connection was lost, please try again later.
Every line of text is measured against a human label.
Fresh bread is baked here every morning before seven.
The museum offers free entry on the first Sunday of each month.
Our team will reply to your message within one business day.
The parcel was delivered to the reception desk at noon.
"""

EN_WORDS = """
invoice receipt total amount date number customer account payment balance
name address phone email city country code item quantity price discount
report summary table figure section chapter page index appendix notes
speed accuracy model engine image document server client request response
"""

EN_ITEMS = """
Coffee|Latte|Espresso|Green Tea|Orange Juice|Mineral Water|Bagel|Croissant|Muffin|
Chicken Rice|Beef Noodles|Fried Egg|Garden Salad|Tomato Soup|Apple Pie|Cheese Cake|
Milk 1L|Bread Loaf|Butter|Eggs x12|Bananas|Paper Towels|Toothpaste|Batteries AA|
Notebook A5|Ballpoint Pen|Stapler|USB Cable|Phone Charger|Umbrella
"""

EN_FORM_FIELDS = """
Full Name|Date of Birth|Gender|Phone Number|Email Address|Home Address|Postal Code|City|
Employer|Job Title|Signature|Date|Emergency Contact|Account Number|Reference No.|Remarks
"""

EN_UI = """
Home|Settings|Sign in|Sign up|Log out|Cancel|OK|Save|Delete|Edit|Search|Back|Next|
Messages|Notifications|Help|About|Profile|My Orders|Cart|Favorites|Share|Refresh|
Upload|Download|Username|Password|Forgot password?|Remember me|All|Recent|More|Send|
Dashboard|Reports|Export|Import|Filter|Sort by|Apply|Close|Open file|New project
"""

EN_NAMES = "Alice Chen|Bob Smith|Carol Wang|David Lee|Emma Brown|Frank Liu|Grace Zhang|Henry Wu"

EN_STREETS = "Main Street|Oak Avenue|River Road|Park Lane|Hill Street|Lake Drive|King Road|Station Road"

MIXED_SENTENCES = """
使用 Python 3.11 处理 PDF 文件非常方便。
请把 Excel 表格发送到邮箱 service@example.com。
本次测试使用了 ONNX Runtime 和 CPU 推理。
订单号 A2024-0815 已经发货，请注意查收。
会议时间：2024年6月18日 14:30，地点：A座302。
新版 App 支持 iOS 和 Android 两个平台。
WiFi 密码请咨询前台工作人员。
模型在 GPU 上的速度是 CPU 的十倍以上。
请登录 www.example.com 下载最新版本。
价格：128元，含 VAT 税。
第3章介绍了 OCR 的基本原理。
该设备的电压为 220V，功率为 1500W。
我们的团队有 12 名工程师和 3 名设计师。
文件大小不能超过 10MB。
航班 CA1234 将于 08:45 起飞。
"""


def _lines(block: str) -> list[str]:
    return [s.strip() for s in block.strip().splitlines() if s.strip()]


def _words(block: str) -> list[str]:
    return block.split()


def _bars(block: str) -> list[str]:
    return [s.strip() for s in block.replace("\n", "").split("|") if s.strip()]


CORPUS: dict[str, list[str]] = {
    "zh_sentences": _lines(ZH_SENTENCES),
    "zh_words": _words(ZH_WORDS),
    "zh_items": _words(ZH_ITEMS),
    "zh_fields": _words(ZH_FORM_FIELDS),
    "zh_ui": _words(ZH_UI),
    "zh_names": _words(ZH_NAMES),
    "zh_places": _words(ZH_PLACES),
    "en_sentences": _lines(EN_SENTENCES),
    "en_words": _words(EN_WORDS),
    "en_items": _bars(EN_ITEMS),
    "en_fields": _bars(EN_FORM_FIELDS),
    "en_ui": _bars(EN_UI),
    "en_names": _bars(EN_NAMES),
    "en_places": _bars(EN_STREETS),
    "mixed_sentences": _lines(MIXED_SENTENCES),
}
